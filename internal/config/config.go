// Package config owns fluffy's configuration: the Config type, its defaults,
// and the hierarchy that builds the effective value of every key —
// built-in defaults < user file < project .fluffy/config.yaml < FLUFFY_*
// environment < flags — remembering where each value came from.
//
// Loading is all or nothing: any error (bad YAML, unknown key, wrong type,
// invalid value, a project file setting a key reserved to the user) stops the
// load and names the file, line, column and key. Nothing is half-loaded.
//
// Keys tagged scope:"user" can only be set by the user (user file,
// environment, flags), never by a project file: a repository the agent works
// on must not be able to loosen fluffy's own protections.
package config

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/fluffy-agent/fluffy/internal/units"
)

// Config is the effective configuration. Every leaf field is a key named by
// the dotted path of its yaml tags (sandbox.runtime); the loader discovers
// them by reflection, so adding a field here is all a new key needs. Struct
// tags:
//
//	enum:"a,b,c"   the value must be one of these
//	scope:"user"   a project file may not set it
type Config struct {
	// Home is the data directory ($FLUFFY_HOME).
	Home string `yaml:"home" scope:"user"`
	Log  Log    `yaml:"log"`
	// Model is the default model, "provider/name".
	Model   string  `yaml:"model"`
	Sandbox Sandbox `yaml:"sandbox"`
	Audit   Audit   `yaml:"audit"`
	Policy  Policy  `yaml:"policy"`
	TDD     TDD     `yaml:"tdd"`
	// Approval configures asking a person.
	Approval Approval `yaml:"approval"`
	Kernel   Kernel   `yaml:"kernel"`
	Net      Net      `yaml:"net"`
	Git      Git      `yaml:"git"`

	LLM   LLM   `yaml:"llm"`
	Agent Agent `yaml:"agent"`

	Changeset Changeset `yaml:"changeset"`
	// Sessions bounds sub-agents (docs/subagents.md).
	Sessions Sessions `yaml:"sessions"`

	// Serve configures the assistant daemon (fluffy serve).
	Serve Serve `yaml:"serve"`

	// Memory configures the memory index (docs/memory.md).
	Memory Memory `yaml:"memory"`

	// Backup configures the daemon's scheduled backups
	// (docs/operations.md).
	Backup Backup `yaml:"backup"`

	// Secrets configures the credential broker (docs/secrets.md).
	Secrets Secrets `yaml:"secrets"`

	Sched Sched `yaml:"sched"`
	// Telemetry configures OpenTelemetry export (docs/observability.md).
	Telemetry Telemetry `yaml:"telemetry"`
}

// Telemetry configures the traces fluffy exports over OTLP. User only: a
// project must not be able to send the person's sessions to a collector.
type Telemetry struct {
	// OTLPEndpoint is the collector's URL (http://host:4318 for HTTP,
	// http://host:4317 for gRPC; https for TLS); empty exports nothing.
	OTLPEndpoint string `yaml:"otlp_endpoint" scope:"user"`
	// OTLPProtocol is the OTLP transport.
	OTLPProtocol string `yaml:"otlp_protocol" enum:"http,grpc" scope:"user"`
	// HeadersEnv names an environment variable holding the export's
	// headers as key=value,key=value (an API key stays out of the file).
	HeadersEnv string `yaml:"headers_env" scope:"user"`
	// IncludeContent puts prompt and response text on model spans.
	IncludeContent bool `yaml:"include_content" scope:"user"`
	// Prometheus serves /metrics on fluffy serve's health listener.
	Prometheus bool `yaml:"prometheus" scope:"user"`
	// MetricsInterval is how often the metrics go to OTLPEndpoint.
	MetricsInterval units.Duration `yaml:"metrics_interval" scope:"user"`
}

// Memory configures the memory index: how passages get their vectors and
// which folders besides the memory files it indexes. User only: a project
// must not be able to send the person's memory to a provider.
type Memory struct {
	// Embeddings is the embedder: local (learned from the memory itself,
	// sends nothing anywhere) or a provider's embedding API, with the key
	// of the provider's models (docs/models.md).
	Embeddings string `yaml:"embeddings" enum:"local,openai,gemini,ollama" scope:"user"`
	// Model is the provider's embedding model; empty takes its default.
	Model string `yaml:"model" scope:"user"`
	// BaseURL overrides the provider's address; empty takes
	// llm.base_urls, then the provider's variable and default.
	BaseURL string `yaml:"base_url" scope:"user"`
	// Sources are folders indexed read-only besides the memory files
	// (a repository's docs/): memory.search finds their Markdown by
	// path, memory.write never writes them.
	Sources []string `yaml:"sources" scope:"user"`
}

// Backup configures backups of fluffy.db and the audit log.
type Backup struct {
	// Interval is how often the assistant daemon (fluffy serve) takes a
	// backup; 0 takes none.
	Interval units.Duration `yaml:"interval" scope:"user"`
	// Keep is how many backups are kept; older ones are removed after
	// each new one. 0 keeps all.
	Keep int `yaml:"keep" scope:"user"`
}

// Changeset configures sessions' change sets (docs/changesets.md).
type Changeset struct {
	AutoApply AutoApply `yaml:"auto_apply"`
}

// AutoApply holds the criteria under which the kernel applies a session's
// change set by itself when the session ends. Every key loosens or bounds
// what reaches the working tree without a person's review, so none may be
// set by a project file.
type AutoApply struct {
	// Enabled turns auto-apply on; off, every change set waits for review.
	Enabled bool `yaml:"enabled" scope:"user"`
	// MaxFiles is the most changed paths a change set may have.
	MaxFiles int `yaml:"max_files" scope:"user"`
	// RequireTestsGreen: the session's last test run passed, after its
	// last write (the TDD machine's record).
	RequireTestsGreen bool `yaml:"require_tests_green" scope:"user"`
	// AllowDeletions lets a change set that deletes files apply itself.
	AllowDeletions bool `yaml:"allow_deletions" scope:"user"`
	// AllowBinary lets a change set with binary files apply itself.
	AllowBinary bool `yaml:"allow_binary" scope:"user"`
}

// Git configures the git tools.
type Git struct {
	// AuthorName and AuthorEmail sign the commits git.commit records
	// (author and committer).
	AuthorName  string `yaml:"author_name" scope:"user"`
	AuthorEmail string `yaml:"author_email" scope:"user"`
}

// Approval configures asking a person.
type Approval struct {
	// Timeout denies what is still open when it elapses.
	Timeout units.Duration `yaml:"timeout" scope:"user"`
	// TokenTTL is how long the capability token of an approved step
	// lives; tokens also end with their session.
	TokenTTL units.Duration `yaml:"token_ttl" scope:"user"`
	// TokenUses is how many times a step approved once may run on its
	// token.
	TokenUses int `yaml:"token_uses" scope:"user"`
	// ClassifierModel is the cheap model that judges classify rules
	// ("provider/model" as fluffy models lists it); empty: classify
	// rules fail closed.
	ClassifierModel string `yaml:"classifier_model" scope:"user"`
	// Route lists the person's approval channels: every approval request
	// of the assistant daemon also goes there (docs/serve.md).
	Route []Route `yaml:"route" scope:"user"`
	// Approvers are the principals whose answer on a channel resolves an
	// approval request ("@me:example.org", "me@example.org"); nobody
	// else's, whatever room they are in.
	Approvers []string `yaml:"approvers" scope:"user"`
}

// Kernel configures the kernel process the CLI starts on demand.
type Kernel struct {
	// IdleTimeout is how long a kernel started for a one-shot command
	// keeps running without any client before it exits.
	IdleTimeout units.Duration `yaml:"idle_timeout"`
	// StartTimeout bounds the wait for a starting kernel's first pong.
	StartTimeout units.Duration `yaml:"start_timeout"`
	// GCPercent is the kernel process's garbage collection target
	// (runtime/debug.SetGCPercent; Go's own default is 100, -1 turns
	// the collector off, 0 leaves Go's default): a long-lived daemon with a small live heap
	// collects less often, and its tool calls are slowed less, with a
	// higher one. GOGC in the kernel's environment wins.
	GCPercent int `yaml:"gc_percent" scope:"user"`
	// MemoryLimit is the kernel process's soft memory limit
	// (debug.SetMemoryLimit): the collector works harder as the heap
	// nears it, which bounds what GCPercent lets the heap grow to. 0
	// sets none. GOMEMLIMIT in the kernel's environment wins.
	MemoryLimit units.Size `yaml:"memory_limit" scope:"user"`
	// MemoryHigh: while the kernel process's memory (what the Go
	// runtime holds from the system) is above it, new sessions are
	// refused with a message saying so; running ones go on. 0 admits
	// all.
	MemoryHigh units.Size `yaml:"memory_high" scope:"user"`
	// OOMProtect lowers the kernel process's oom_score_adj (to -500, when
	// the process may: it needs CAP_SYS_RESOURCE) and raises its
	// sandboxes' (to 1000), so under memory pressure Linux kills a
	// sandboxed command before the daemon that records it.
	OOMProtect bool `yaml:"oom_protect" scope:"user"`
}

// Log configures fluffy's own logs (not the audit log).
type Log struct {
	Level  string `yaml:"level" enum:"debug,info,warn,error"`
	Format string `yaml:"format" enum:"text,json"`
	// MaxSize is the size past which a log file in the data directory's
	// logs/ is rotated (0: never); Keep how many rotated generations are
	// kept; Compress gzips them.
	MaxSize  units.Size `yaml:"max_size" scope:"user"`
	Keep     int        `yaml:"keep" scope:"user"`
	Compress bool       `yaml:"compress" scope:"user"`
}

// Sandbox configures where and how commands run.
type Sandbox struct {
	// Runtime chooses the backend; auto takes native when the host
	// offers it, else a container engine that answers.
	Runtime string `yaml:"runtime" enum:"auto,native,docker,podman"`
	// Image is the container image of the docker and podman runtimes.
	Image string `yaml:"image"`
	// Template is the template used when a caller names none.
	Template string `yaml:"template"`
	// AllowDegraded runs sandboxes with whatever protection the host
	// offers, loudly, instead of refusing.
	AllowDegraded bool `yaml:"allow_degraded" scope:"user"`
	// Timeout is the default wall-time limit of one execution.
	Timeout units.Duration `yaml:"timeout"`
	// Memory is the default memory limit of one execution.
	Memory units.Size `yaml:"memory"`
	// Pids is the default process-count limit of one execution.
	Pids int `yaml:"pids"`
	// TmpSize is the size of the sandbox's tmpfs /tmp.
	TmpSize units.Size `yaml:"tmp_size"`
	// OutputLimit caps captured stdout and stderr, each.
	OutputLimit units.Size `yaml:"output_limit"`
	// Server: auto forwards 'fluffy sandbox run' to the per-user sandbox
	// server, started on first use (docs/sandbox-server.md); off runs each
	// command in its own fluffy-core process. The small fluffy binary
	// reads the environment variable (FLUFFY_SANDBOX_SERVER=off) before
	// anything else; the server honours the key from the files.
	Server string `yaml:"server" enum:"auto,off" scope:"user"`
}

// Audit configures the tamper-evident audit log.
type Audit struct {
	FlushEntries    int            `yaml:"flush_entries" scope:"user"`
	FlushInterval   units.Duration `yaml:"flush_interval" scope:"user"`
	CheckpointEvery int            `yaml:"checkpoint_every" scope:"user"`
	CheckpointAfter units.Duration `yaml:"checkpoint_after" scope:"user"`
	// RetentionDays of 0 keeps everything.
	RetentionDays int        `yaml:"retention_days" scope:"user"`
	WarnSize      units.Size `yaml:"warn_size" scope:"user"`
}

// Policy configures the policy engine.
type Policy struct {
	// Default is the effect when no rule matches.
	Default string `yaml:"default" enum:"allow,approve,block" scope:"user"`
}

// TDD configures the coding agent's test-first discipline.
//
// The pattern and budget keys loosen the discipline, so only the user sets
// them: a repository must not declare its source files exempt.
type TDD struct {
	Mode string `yaml:"mode" enum:"strict,explore,debug" scope:"user"`
	// TestPatterns are added to the built-in test-file globs (Go, Python,
	// JS/TS, Rust, Java/Kotlin), e.g. "spec/**".
	TestPatterns []string `yaml:"test_patterns" scope:"user"`
	// ExemptPatterns are added to the built-in exempt globs (docs,
	// Markdown, config, generated files).
	ExemptPatterns []string `yaml:"exempt_patterns" scope:"user"`
	// DebtBudget is explore mode's tech-debt budget in percentage points:
	// how far the coverage of a file changed without a test may fall
	// below its baseline before done.
	DebtBudget int `yaml:"debt_budget" scope:"user"`
}

// Net configures sandbox egress through the audited proxy
// (docs/network.md). Every key loosens or bounds what a sandbox may reach,
// so none may be set by a project file.
type Net struct {
	// Allow holds allow-list rules (host, host:port, *.domain, IP:port)
	// given to every sandbox run with the proxy.
	Allow []string `yaml:"allow" scope:"user"`
	// Templates maps a sandbox template name to its own allow-list rules.
	Templates map[string][]string `yaml:"templates" scope:"user"`
	// AllowAddrs lists non-public address ranges (CIDR, e.g. 10.20.0.0/16)
	// that allow-listed names may resolve to. Empty: names never reach
	// loopback, private or link-local addresses.
	AllowAddrs []string `yaml:"allow_addrs" scope:"user"`
	// MaxUpload and MaxDownload cap the bytes of one request or tunnel.
	MaxUpload   units.Size `yaml:"max_upload" scope:"user"`
	MaxDownload units.Size `yaml:"max_download" scope:"user"`
	// MaxDuration bounds one request or tunnel; IdleTimeout ends a tunnel
	// that moved nothing for that long.
	MaxDuration units.Duration `yaml:"max_duration" scope:"user"`
	IdleTimeout units.Duration `yaml:"idle_timeout" scope:"user"`
	// MaxConns bounds one sandbox's concurrent connections to the proxy.
	MaxConns int `yaml:"max_conns" scope:"user"`
	// HeaderTimeout cuts off a client that has not sent a request's
	// headers; ConnectTimeout bounds connecting upstream;
	// ResponseTimeout bounds waiting for an upstream's response headers.
	HeaderTimeout   units.Duration `yaml:"header_timeout" scope:"user"`
	ConnectTimeout  units.Duration `yaml:"connect_timeout" scope:"user"`
	ResponseTimeout units.Duration `yaml:"response_timeout" scope:"user"`
	// Registries turns on package registries for a session's commands
	// (docs/network.md).
	Registries Registries `yaml:"registries"`
}

// Registries name, per runner, the package registry a session's commands
// may use: its URL, or "default" for the public one (DefaultRegistries).
// Empty leaves the runner offline. Each enabled registry adds a default
// policy rule that sends its hosts to approval and points the tool at it
// in the sandbox. User only: a project must not choose where the agent
// fetches code from.
type Registries struct {
	Go   string `yaml:"go" scope:"user"`
	PyPI string `yaml:"pypi" scope:"user"`
	NPM  string `yaml:"npm" scope:"user"`
}

// DefaultRegistries are the public registries "default" names, by the
// runner's key under net.registries.
var DefaultRegistries = map[string]string{
	"go":   "https://proxy.golang.org",
	"pypi": "https://pypi.org/simple",
	"npm":  "https://registry.npmjs.org",
}

// RegistryDefault is the value of a net.registries key naming the
// public registry.
const RegistryDefault = "default"

// Enabled lists the registries turned on, by runner key (go, pypi,
// npm), with "default" resolved to the public URL.
func (r Registries) Enabled() map[string]string {
	out := map[string]string{}
	for k, v := range map[string]string{"go": r.Go, "pypi": r.PyPI, "npm": r.NPM} {
		if v == RegistryDefault {
			v = DefaultRegistries[k]
		}
		if v != "" {
			out[k] = v
		}
	}
	return out
}

// CheckRegistryURL checks a net.registries value: "default", or an http
// or https URL with a host name or IPv4 address the policy can name (no
// IPv6, no glob characters), without credentials, query or fragment.
func CheckRegistryURL(s string) error {
	if s == "" || s == RegistryDefault {
		return nil
	}
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("not a URL: %w", err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("%q: the URL must start with https:// or http://, or be %q", s, RegistryDefault)
	case u.User != nil:
		return fmt.Errorf("%q: credentials do not belong in the URL (the sandbox's environment would show them)", s)
	case u.RawQuery != "" || u.Fragment != "" || u.Opaque != "":
		return fmt.Errorf("%q: a registry URL has no query or fragment", s)
	case u.Hostname() == "":
		return fmt.Errorf("%q: the URL has no host", s)
	}
	for _, c := range u.Hostname() {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-') {
			return fmt.Errorf("%q: host %q must be a name or an IPv4 address (a policy rule names it)", s, u.Hostname())
		}
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("%q: port must be 1-65535", s)
		}
	}
	return nil
}

// LLM configures the model providers (see docs/models.md).
type LLM struct {
	// BaseURLs overrides a provider's address, by provider name. User
	// only: a project must not be able to send the user's key elsewhere.
	BaseURLs BaseURLs `yaml:"base_urls" scope:"user"`
	// Prices, in US dollars per million tokens, by "provider/name"; they
	// feed cost accounting and agent.max_cost.
	Prices Prices `yaml:"prices" scope:"user"`
	// RetryAttempts bounds the tries of one model call, first included.
	RetryAttempts int `yaml:"retry_attempts"`
	// RetryBudget bounds the time spent waiting between retries of one call.
	RetryBudget units.Duration `yaml:"retry_budget"`
}

// BaseURLs maps provider names to addresses.
type BaseURLs map[string]string

func (b BaseURLs) String() string {
	if len(b) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(b))
	for k := range b {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		keys[i] = k + "=" + b[k]
	}
	return strings.Join(keys, ", ")
}

// Prices maps "provider/name" to a price.
type Prices map[string]Price

func (p Prices) String() string {
	return fmt.Sprintf("%d models (fluffy models lists them)", len(p))
}

// Price is what a model charges, in US dollars per million tokens.
type Price struct {
	Input      float64 `yaml:"input"`
	Output     float64 `yaml:"output"`
	CacheRead  float64 `yaml:"cache_read"`
	CacheWrite float64 `yaml:"cache_write"`
}

// Agent configures the agent loop's limits and context budget.
type Agent struct {
	// MaxTurns bounds the model calls of one run.
	MaxTurns int `yaml:"max_turns"`
	// MaxTokens bounds the tokens (in + out) of one run; 0 is no limit.
	MaxTokens int `yaml:"max_tokens"`
	// MaxCost bounds the cost of one run in US dollars; 0 is no limit.
	MaxCost float64 `yaml:"max_cost" scope:"user"`
	// MaxTime bounds the wall time of one run.
	MaxTime units.Duration `yaml:"max_time"`
	// ContextTokens is the context window budget: older turns are
	// summarized and dropped beyond it.
	ContextTokens int `yaml:"context_tokens"`
	// ToolResultLimit truncates each tool result sent to the model.
	ToolResultLimit units.Size `yaml:"tool_result_limit"`
}

// Default returns the built-in defaults for a process with the given
// environment (used only to place the data directory).
func Default(env Env) Config {
	return Config{
		Home:      defaultHome(env),
		Log:       Log{Level: "info", Format: "text", MaxSize: 8 << 20, Keep: 5},
		Telemetry: Telemetry{OTLPProtocol: "http", MetricsInterval: units.Duration(60e9)},
		Model:     "replay/demo",
		Sandbox: Sandbox{
			Runtime:     "native",
			Image:       "fluffy-base:latest",
			Template:    "code-executor",
			Timeout:     units.Duration(10 * 60e9),
			Memory:      2 << 30,
			Pids:        512,
			TmpSize:     256 << 20,
			OutputLimit: 1 << 20,
			Server:      "auto",
		},
		Audit: Audit{
			FlushEntries:    100,
			FlushInterval:   units.Duration(500e6),
			CheckpointEvery: 1000,
			CheckpointAfter: units.Duration(60e9),
			RetentionDays:   0,
			WarnSize:        1 << 30,
		},
		Policy:   Policy{Default: "approve"},
		TDD:      TDD{Mode: "strict", DebtBudget: 5},
		Git:      Git{AuthorName: "fluffy", AuthorEmail: "fluffy@localhost"},
		Approval: Approval{Timeout: units.Duration(10 * 60e9), TokenTTL: units.Duration(30 * 60e9), TokenUses: 1},
		Net: Net{
			MaxUpload:       64 << 20,
			MaxDownload:     1 << 30,
			MaxDuration:     units.Duration(10 * 60e9),
			IdleTimeout:     units.Duration(60e9),
			MaxConns:        256,
			HeaderTimeout:   units.Duration(10e9),
			ConnectTimeout:  units.Duration(10e9),
			ResponseTimeout: units.Duration(60e9),
		},
		Kernel: Kernel{IdleTimeout: units.Duration(5 * 60e9), StartTimeout: units.Duration(5e9),
			GCPercent: 400, MemoryLimit: 1 << 30, MemoryHigh: 768 << 20, OOMProtect: true},

		LLM: LLM{
			// Published list prices when written (November 2026); set
			// llm.prices in your user file to correct or extend them.
			Prices: Prices{
				"anthropic/claude-sonnet-4-5": {Input: 3, Output: 15, CacheRead: 0.3, CacheWrite: 3.75},
				"anthropic/claude-opus-4-1":   {Input: 15, Output: 75, CacheRead: 1.5, CacheWrite: 18.75},
				"anthropic/claude-haiku-4-5":  {Input: 1, Output: 5, CacheRead: 0.1, CacheWrite: 1.25},
				"openai/gpt-5":                {Input: 1.25, Output: 10, CacheRead: 0.125},
				"openai/gpt-5-mini":           {Input: 0.25, Output: 2, CacheRead: 0.025},
				"gemini/gemini-2.5-pro":       {Input: 1.25, Output: 10, CacheRead: 0.31},
				"gemini/gemini-2.5-flash":     {Input: 0.3, Output: 2.5, CacheRead: 0.075},
			},
			RetryAttempts: 4,
			RetryBudget:   units.Duration(120e9),
		},
		Agent: Agent{
			MaxTurns:        50,
			MaxTime:         units.Duration(30 * 60e9),
			ContextTokens:   150000,
			ToolResultLimit: 32 << 10,
		},

		Changeset: Changeset{AutoApply: AutoApply{MaxFiles: 10, RequireTestsGreen: true}},
		Sessions:  Sessions{MaxDepth: 2, MaxChildren: 4},

		Serve:  Serve{Heartbeat: units.Duration(30 * 60e9), ContextTokens: 12000, Grace: units.Duration(30e9), Email: Email{MaxSize: 10 << 20}},
		Memory: Memory{Embeddings: "local"},
		Backup: Backup{Interval: units.Duration(24 * 3600e9), Keep: 7},

		Sched: defaultSched(),
	}
}

// Env is the process environment as a lookup function (os.LookupEnv in
// production, a map in tests).
type Env func(key string) (string, bool)

func (e Env) get(key string) string {
	if e == nil {
		return ""
	}
	v, _ := e(key)
	return v
}

func defaultHome(env Env) string {
	if x := env.get("XDG_DATA_HOME"); x != "" {
		return filepath.Join(x, "fluffy")
	}
	return filepath.Join(env.get("HOME"), ".local", "share", "fluffy")
}

// UserFile is the user's configuration file: $XDG_CONFIG_HOME/fluffy/config.yaml.
func UserFile(env Env) string {
	if x := env.get("XDG_CONFIG_HOME"); x != "" {
		return filepath.Join(x, "fluffy", "config.yaml")
	}
	return filepath.Join(env.get("HOME"), ".config", "fluffy", "config.yaml")
}

// ProjectRoot returns the nearest directory at or above dir that holds a
// .fluffy directory or a .git entry, or "" when there is none.
func ProjectRoot(dir string) string {
	dir = filepath.Clean(dir)
	for {
		for _, marker := range []string{".fluffy", ".git"} {
			if _, err := os.Stat(filepath.Join(dir, marker)); err == nil {
				return dir
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

// ProjectFile is the project configuration file of the project holding dir,
// or "" outside any project.
func ProjectFile(dir string) string {
	root := ProjectRoot(dir)
	if root == "" {
		return ""
	}
	return filepath.Join(root, ".fluffy", "config.yaml")
}
