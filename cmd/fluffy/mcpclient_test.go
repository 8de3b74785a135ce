package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rogpeppe/go-internal/testscript"
)

func init() {
	scriptCmds["mcp-client"] = mcpClient
}

// scriptEnv is the environment a script's own commands run with, for a
// process a script command starts: the test's, with the script's values
// of the variables fluffy reads.
func scriptEnv(ts *testscript.TestScript) []string {
	env := os.Environ()
	for _, k := range []string{"HOME", "PATH", "TMPDIR", "WORK", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_RUNTIME_DIR", "XDG_CACHE_HOME",
		"FLUFFY_KERNEL_IDLE_TIMEOUT", "FLUFFY_SANDBOX_SERVER", "FLUFFY_HOME"} {
		if v := ts.Getenv(k); v != "" {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// scriptProgram is the path of a script's command (testscript puts them
// on the script's PATH).
func scriptProgram(ts *testscript.TestScript, name string) string {
	for _, dir := range filepath.SplitList(ts.Getenv("PATH")) {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p
		}
	}
	ts.Fatalf("%s is not on the script's PATH", name)
	return ""
}

var approvalRequest = regexp.MustCompile(`approval \(request ([0-9a-z]+)\)`)

// mcpClient [--answer=ANSWER] TOOL=ARGS... is an MCP client on the
// official SDK driving "fluffy mcp serve" in the current directory: it
// prints the tools offered ("tools: ..."), then calls each TOOL with the
// JSON object ARGS and prints "call TOOL error=BOOL decision=..." and the
// result's text. With --answer, a call that waits for a person's
// approval is answered with ANSWER through "fluffy approve" (the path a
// person takes), and "answered" is printed. Last come the server's
// stderr lines, each after "server: ".
func mcpClient(ts *testscript.TestScript, neg bool, args []string) {
	var answer string
	if len(args) > 0 {
		if a, ok := strings.CutPrefix(args[0], "--answer="); ok {
			answer, args = a, args[1:]
		}
	}
	if neg {
		ts.Fatalf("usage: mcp-client [--answer=ANSWER] TOOL=ARGS...")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	fluffy := scriptProgram(ts, "fluffy")
	env := scriptEnv(ts)
	cmd := exec.Command(fluffy, "mcp", "serve")
	cmd.Dir, cmd.Env = ts.MkAbs("."), env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out := ts.Stdout()
	var mu sync.Mutex // guards out
	printf := func(format string, a ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, format, a...)
	}
	answered := map[string]bool{}
	var wg sync.WaitGroup
	onProgress := func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
		m := approvalRequest.FindStringSubmatch(r.Params.Message)
		if m == nil || answer == "" {
			return
		}
		mu.Lock()
		seen := answered[m[1]]
		answered[m[1]] = true
		mu.Unlock()
		if seen {
			return
		}
		wg.Go(func() {
			a := exec.CommandContext(ctx, fluffy, "approve", m[1], answer)
			a.Dir, a.Env = cmd.Dir, env
			if b, err := a.CombinedOutput(); err != nil {
				printf("approve %s failed: %v: %s\n", m[1], err, b)
				return
			}
			printf("answered\n")
		})
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "mcp-client", Version: "test"}, &mcp.ClientOptions{ProgressNotificationHandler: onProgress})
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		ts.Fatalf("connect to fluffy mcp serve: %v\n%s", err, stderr.String())
	}
	lt, err := cs.ListTools(ctx, nil)
	ts.Check(err)
	var names []string
	for _, t := range lt.Tools {
		names = append(names, t.Name)
	}
	slices.Sort(names)
	printf("tools: %s\n", strings.Join(names, " "))
	for i, a := range args {
		name, raw, ok := strings.Cut(a, "=")
		if !ok {
			ts.Fatalf("call %q: want TOOL=ARGS", a)
		}
		var callArgs map[string]any
		if err := json.Unmarshal([]byte(raw), &callArgs); err != nil {
			ts.Fatalf("call %s: arguments: %v", name, err)
		}
		p := &mcp.CallToolParams{Name: name, Arguments: callArgs}
		p.SetProgressToken(fmt.Sprint(i))
		res, err := cs.CallTool(ctx, p)
		if err != nil {
			ts.Fatalf("call %s: %v\n%s", name, err, stderr.String())
		}
		var text strings.Builder
		for _, c := range res.Content {
			if t, ok := c.(*mcp.TextContent); ok {
				text.WriteString(t.Text)
			}
		}
		printf("call %s error=%t decision=%v session=%v\n%s\n", name, res.IsError, res.Meta["fluffy/decision"], res.Meta["fluffy/session"], strings.TrimRight(text.String(), "\n"))
	}
	wg.Wait()
	if err := cs.Close(); err != nil {
		ts.Logf("close: %v", err)
	}
	for _, l := range strings.Split(strings.TrimRight(stderr.String(), "\n"), "\n") {
		printf("server: %s\n", l)
	}
}
