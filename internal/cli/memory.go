package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fluffy-agent/fluffy/internal/doctor"
	"github.com/fluffy-agent/fluffy/internal/ipc"
	"github.com/fluffy-agent/fluffy/internal/memory"
	"github.com/fluffy-agent/fluffy/internal/memory/embed"
	"github.com/fluffy-agent/fluffy/internal/tui/termsafe"
)

func newMemoryCmd(a *App) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "memory",
		Short: "Search, read and reindex the assistant's memory files",
		Long: `memory works on the assistant workspace's memory files (serve.workspace:
MEMORY.md and memory/**/*.md) and their index in the data directory
(memory/index.db), which every command brings up to date first. The index
is derived data: 'reindex --full' rebuilds it from the files. Everything
stays on this machine. See docs/memory.md.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newMemorySearchCmd(a), newMemoryGetCmd(a), newMemoryReindexCmd(a), newMemoryStatsCmd(a))
	return cmd
}

// memoryOptions are the index's options from the configuration.
func (a *App) memoryOptions(fullText bool) (memory.Options, error) {
	l, err := a.Config()
	if err != nil {
		return memory.Options{}, err
	}
	d, err := a.DataDir()
	if err != nil {
		return memory.Options{}, err
	}
	home, _ := a.Getenv("HOME")
	ws := memory.Workspace(l.Config.Serve.Workspace, home)
	if ws == "" {
		return memory.Options{}, &ExitError{Code: ExitUsage, Msg: "no assistant workspace: set serve.workspace (or HOME for the default ~/.fluffy/workspace)"}
	}
	o := memory.Options{Root: a.abs(ws), DB: memory.IndexPath(d), Logger: a.Logger(), Sources: memory.SourcesFrom(l.Config.Memory.Sources, home)}
	if !fullText {
		e, err := embed.Resolve(l.Config, a.Getenv).Make(context.Background())
		if err != nil {
			fmt.Fprintf(a.Stderr, "fluffy: %v: searching full text alone\n", err)
		} else {
			o.Embedder = e
		}
	}
	return o, nil
}

// openMemory opens the index and syncs it, telling of files left out.
// When another process holds the index (the daemon, whose watcher keeps
// it current), it is opened to read as it is: no second writer.
func (a *App) openMemory(cmd *cobra.Command, fullText bool) (*memory.Index, error) {
	o, err := a.memoryOptions(fullText)
	if err != nil {
		return nil, err
	}
	x, err := memory.Open(cmd.Context(), o)
	if errors.Is(err, memory.ErrHeld) {
		a.Logger().Debug("memory: reading the index its holder keeps current", "err", err)
		return memory.OpenReader(cmd.Context(), o)
	}
	if err != nil {
		return nil, err
	}
	rep, err := x.Sync(cmd.Context())
	if err != nil {
		x.Close()
		return nil, err
	}
	a.printSkipped(rep)
	return x, nil
}

func (a *App) printSkipped(rep memory.SyncReport) {
	for _, s := range rep.Skipped {
		fmt.Fprintf(a.Stderr, "fluffy: memory: %s left out: %s\n", termsafe.Line(s.Path), termsafe.Line(s.Reason))
	}
}

func newMemorySearchCmd(a *App) *cobra.Command {
	var (
		k                  int
		path, since, until string
		mode               string
		asJSON             bool
	)
	cmd := &cobra.Command{
		Use:   "search QUERY...",
		Short: "Find the memory passages that best match a query (full text and meaning)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			q := memory.Query{Text: strings.Join(args, " "), K: k, Path: path, Mode: memory.Mode(mode)}
			switch q.Mode {
			case memory.Hybrid, memory.FullText, memory.Vector:
			default:
				return &ExitError{Code: ExitUsage, Msg: fmt.Sprintf("--mode %q: want hybrid, fulltext or vector", mode)}
			}
			var err error
			for _, d := range []struct {
				s string
				t *time.Time
			}{{since, &q.Since}, {until, &q.Until}} {
				if d.s == "" {
					continue
				}
				if *d.t, err = time.Parse(time.DateOnly, d.s); err != nil {
					return &ExitError{Code: ExitUsage, Msg: fmt.Sprintf("%q: want a day as YYYY-MM-DD", d.s)}
				}
			}
			x, err := a.openMemory(cmd, q.Mode == memory.FullText)
			if err != nil {
				return err
			}
			defer x.Close()
			res, err := x.Search(cmd.Context(), q)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(termsafe.NewJSONWriter(a.Stdout))
				enc.SetIndent("", "  ")
				return enc.Encode(res)
			}
			if res.Note != "" {
				fmt.Fprintf(a.Stderr, "fluffy: memory: %s\n", termsafe.Line(res.Note))
			}
			if len(res.Hits) == 0 {
				fmt.Fprintln(a.Stdout, "no passage found")
				return nil
			}
			for _, h := range res.Hits {
				head := ""
				if h.Heading != "" {
					head = "  # " + termsafe.Line(h.Heading)
				}
				fmt.Fprintf(a.Stdout, "%s:%d%s\n  %s\n", termsafe.Line(h.Path), h.Line, head, termsafe.Line(h.Snippet))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVarP(&k, "top", "k", 5, "how many passages")
	f.StringVar(&path, "path", "", "only this memory file or folder (e.g. memory/notes)")
	f.StringVar(&since, "since", "", "only daily logs on or after this day (YYYY-MM-DD)")
	f.StringVar(&until, "until", "", "only daily logs on or before this day (YYYY-MM-DD)")
	f.StringVar(&mode, "mode", string(memory.Hybrid), "ranking: hybrid, fulltext or vector")
	f.BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}

func newMemoryGetCmd(a *App) *cobra.Command {
	var heading string
	cmd := &cobra.Command{
		Use:   "get PATH",
		Short: "Print a memory file, or the section under one heading, with line numbers",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o, err := a.memoryOptions(true)
			if err != nil {
				return err
			}
			s, err := memory.GetFrom(o.Root, o.Sources, args[0], heading)
			switch {
			case errors.Is(err, memory.ErrOutside), errors.Is(err, memory.ErrNoSection):
				return &ExitError{Code: ExitUsage, Msg: termsafe.Line(err.Error())}
			case errors.Is(err, fs.ErrNotExist):
				return &ExitError{Code: 1, Msg: fmt.Sprintf("no memory file %s in %s", termsafe.Line(args[0]), termsafe.Line(o.Root))}
			case err != nil:
				return err
			}
			for i, ln := range strings.Split(strings.TrimSuffix(s.Text, "\n"), "\n") {
				fmt.Fprintf(a.Stdout, "%6d\t%s\n", s.Line+i, termsafe.Line(ln))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&heading, "heading", "", "only the section under this heading")
	return cmd
}

func newMemoryReindexCmd(a *App) *cobra.Command {
	var full bool
	cmd := &cobra.Command{
		Use:   "reindex",
		Short: "Bring the memory index up to date with the files (--full: rebuild it)",
		Long: `reindex brings the memory index up to date with the files; --full builds
it again from nothing. When a daemon (fluffy serve) holds the index, it
does the work on the index it serves from; otherwise this command does,
holding the index's lock so that no other process writes it meanwhile.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			start := time.Now()
			res, err := a.reindexByKernel(cmd.Context(), full)
			if err != nil {
				return err
			}
			if !res.Held {
				if res.Report, err = a.reindexHere(cmd.Context(), full); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(a.Stdout, "the daemon (pid %d) holds the index and reindexed it\n", res.PID)
				a.printSkipped(res.Report)
			}
			rep := res.Report
			fmt.Fprintf(a.Stdout, "indexed %d file(s) (%d chunks), %d unchanged, %d removed, %d left out; %d vector(s) made in %s\n",
				rep.Indexed, rep.Chunks, rep.Unchanged, rep.Removed, len(rep.Skipped), rep.Embedded, time.Since(start).Round(time.Millisecond))
			if rep.Learned {
				fmt.Fprintln(a.Stdout, "the local embedding model learned from the memory again")
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&full, "full", false, "delete the index and build it again from the files")
	return cmd
}

// reindexByKernel asks the running kernel, if any, to reindex the index
// it holds; Held is false when none runs or it holds none.
func (a *App) reindexByKernel(ctx context.Context, full bool) (memory.ReindexResult, error) {
	cl, err := a.dialRunning(ctx)
	if err != nil || cl == nil {
		return memory.ReindexResult{}, err
	}
	defer cl.Close()
	var res memory.ReindexResult
	err = cl.Call(ctx, memory.MethodReindex, memory.ReindexParams{Full: full}, &res)
	if errors.Is(err, ipc.ErrUnknownMethod) {
		// A kernel from before the method holds no index this command
		// could not take the lock of.
		return memory.ReindexResult{}, nil
	}
	if err != nil {
		return memory.ReindexResult{}, fmt.Errorf("memory reindex by the running kernel: %w", err)
	}
	return res, nil
}

// reindexLockWait is how long reindex waits for another writer of the
// index (a search syncing it) to finish.
const reindexLockWait = 10 * time.Second

// reindexHere reindexes in this process, holding the index's lock: with
// --full the index's files are deleted under it and made again.
func (a *App) reindexHere(ctx context.Context, full bool) (memory.SyncReport, error) {
	o, err := a.memoryOptions(false)
	if err != nil {
		return memory.SyncReport{}, err
	}
	lk, err := memory.Lock(ctx, o.DB, reindexLockWait)
	if errors.Is(err, memory.ErrHeld) {
		return memory.SyncReport{}, &ExitError{Code: ExitFailure, Msg: err.Error() + "; try again when it is done"}
	}
	if err != nil {
		return memory.SyncReport{}, err
	}
	defer lk.Release()
	if full {
		for _, suffix := range []string{"", "-wal", "-shm"} {
			if err := os.Remove(o.DB + suffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return memory.SyncReport{}, fmt.Errorf("remove the memory index: %w", err)
			}
		}
	}
	o.Lock = lk
	x, err := memory.Open(ctx, o)
	if err != nil {
		return memory.SyncReport{}, err
	}
	defer x.Close()
	rep, err := x.Sync(ctx)
	if err != nil {
		return rep, err
	}
	a.printSkipped(rep)
	return rep, nil
}

func newMemoryStatsCmd(a *App) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Show what the memory index holds",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			x, err := a.openMemory(cmd, false)
			if err != nil {
				return err
			}
			defer x.Close()
			s, err := x.Stats(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(termsafe.NewJSONWriter(a.Stdout))
				enc.SetIndent("", "  ")
				return enc.Encode(s)
			}
			search := "hybrid (full text and local vectors)"
			if s.Vectors == 0 {
				search = "full text only (no vectors yet: the local model learns once the notes repeat some words)"
			}
			fmt.Fprintf(a.Stdout, "workspace  %s\nindex      %s\nfiles      %d (%d bytes)\nchunks     %d\nvectors    %d\nmodel      %s\nsearch     %s\n",
				termsafe.Line(x.Root()), termsafe.Line(x.DBPath()), s.Files, s.Bytes, s.Chunks, s.Vectors, termsafe.Line(s.Model), search)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}

// memoryCheck is doctor's line on memory search: hybrid, or full text
// alone and why. It reads the index as it is (no scan), and creates
// nothing.
func memoryCheck(ctx context.Context, a *App) doctor.Check {
	c := doctor.Check{Name: "memory search", Status: doctor.OK}
	o, err := a.memoryOptions(false)
	if err != nil {
		c.Detail = "no assistant workspace"
		return c
	}
	if !memory.HasMemory(o.Root) && len(o.Sources) == 0 {
		c.Detail = "no memory files in " + o.Root
		return c
	}
	l, err := a.Config()
	if err != nil {
		c.Detail = err.Error()
		return c
	}
	set := embed.Resolve(l.Config, a.Getenv)
	if !set.Local() && set.KeyFrom == "" && set.Provider != embed.Ollama {
		c.Status, c.Detail = doctor.Warn, "full text only: memory.embeddings is "+set.Provider+" and no key is set"
		c.Fix = "set the provider's key as for its models (docs/models.md), or memory.embeddings: local"
		return c
	}
	if _, err := os.Stat(o.DB); errors.Is(err, fs.ErrNotExist) {
		c.Detail = "not indexed yet: the first search (or 'fluffy memory reindex') indexes " + o.Root
		return c
	}
	// Read as it is, beside a daemon that holds it.
	x, err := memory.OpenReader(ctx, o)
	if err != nil {
		c.Status, c.Detail, c.Fix = doctor.Warn, err.Error(), "fluffy memory reindex --full (the index is derived from the files)"
		return c
	}
	defer x.Close()
	s, err := x.Stats(ctx)
	switch {
	case err != nil:
		c.Status, c.Detail, c.Fix = doctor.Warn, err.Error(), "fluffy memory reindex --full (the index is derived from the files)"
	case s.Chunks > 0 && s.Vectors == 0 && !set.Local():
		c.Status = doctor.Warn
		c.Detail = fmt.Sprintf("full text only: %d chunk(s) and no vectors of %s yet", s.Chunks, set.Provider+":"+set.Model)
		c.Fix = "fluffy memory reindex (embeds every passage with " + set.Provider + " at " + set.BaseURL + ")"
	case s.Chunks > 0 && s.Vectors == 0:
		c.Status = doctor.Warn
		c.Detail = fmt.Sprintf("full text only: %d chunk(s) and no vectors (the local model has not learned: too few notes repeat words across passages)", s.Chunks)
		c.Fix = "nothing to do: search works on full text, and the local model learns as the notes grow ('fluffy memory reindex' to try now)"
	case !set.Local():
		c.Detail = fmt.Sprintf("hybrid: %d chunks, %d vectors (%s); passages and queries are sent to %s", s.Chunks, s.Vectors, s.Model, set.BaseURL)
	default:
		c.Detail = fmt.Sprintf("hybrid: %d chunks, %d vectors (%s), all on this machine", s.Chunks, s.Vectors, s.Model)
	}
	return c
}
