package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/sandboxd"
	"github.com/fluffy-agent/fluffy/internal/sandboxrun"
)

// The server hands a call back to its client, running nothing, when the
// command line is not 'sandbox run' or when the caller's own
// configuration file turns the server off; a bad flag is still the
// command's usage error, answered by the server.
func TestServeCallHandsOver(t *testing.T) {
	dir := t.TempDir()
	cfgDir := filepath.Join(dir, "config")
	if err := os.MkdirAll(filepath.Join(cfgDir, "fluffy"), 0o700); err != nil {
		t.Fatal(err)
	}
	offEnv := filepath.Join(dir, "off")
	if err := os.MkdirAll(filepath.Join(offEnv, "fluffy"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(offEnv, "fluffy", "config.yaml"), []byte("sandbox:\n  server: off\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	host := sandboxrun.NewHost(sandboxrun.HostOptions{})
	defer host.Close()
	marker := filepath.Join(dir, "ran")
	for _, tc := range []struct {
		name     string
		config   string
		args     []string
		want     sandboxd.Reply
		stderrRe string
	}{
		{"not sandbox run", cfgDir, []string{"audit", "verify"}, sandboxd.Reply{HandOver: true}, ""},
		{"server off in the user's file", offEnv, []string{"sandbox", "run", "--", "/bin/sh", "-c", "touch " + marker}, sandboxd.Reply{HandOver: true}, ""},
		{"usage error", cfgDir, []string{"sandbox", "run", "--no-such-flag", "--", "/bin/true"}, sandboxd.Reply{Code: ExitUsage}, "no-such-flag"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := os.Create(filepath.Join(t.TempDir(), "out"))
			if err != nil {
				t.Fatal(err)
			}
			defer out.Close()
			errF, err := os.Create(filepath.Join(t.TempDir(), "err"))
			if err != nil {
				t.Fatal(err)
			}
			defer errF.Close()
			in := &sandboxd.Incoming{
				Request: sandboxd.Request{Args: tc.args, Cwd: dir,
					Environ: []string{"HOME=" + dir, "XDG_CONFIG_HOME=" + tc.config, "FLUFFY_HOME=" + filepath.Join(dir, "data")}},
				Stdin: strings.NewReader(""), Stdout: out, Stderr: errF,
			}
			if got := serveCall(context.Background(), nil, "/nonexistent", host, in); got != tc.want {
				t.Errorf("reply %+v, want %+v", got, tc.want)
			}
			b, _ := os.ReadFile(errF.Name())
			if tc.stderrRe != "" && !strings.Contains(string(b), tc.stderrRe) || tc.stderrRe == "" && len(b) > 0 {
				t.Errorf("stderr %q", b)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Fatal("a handed-over command ran in the server")
			}
		})
	}
}
