package wiring

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/bootstrap"
)

func TestDetectRuntime(t *testing.T) {
	ok := func(context.Context) error { return nil }
	no := func(context.Context) error {
		return errors.New("user namespaces are disabled (fix: sysctl kernel.unprivileged_userns_clone=1)")
	}
	engineOK := func(context.Context, string) error { return nil }
	engineNo := func(_ context.Context, rt string) error { return errors.New(rt + " engine does not answer") }
	cases := []struct {
		name, want string
		p          Probes
		got        string
		msg        []string
	}{
		{"native", "native", Probes{ok, engineNo}, "native", nil},
		{"default is native", "", Probes{ok, engineNo}, "native", nil},
		{"auto takes native first", "auto", Probes{ok, engineOK}, "native", nil},
		{"auto falls back to docker", "auto", Probes{no, engineOK}, "docker", nil},
		{"docker", "docker", Probes{no, engineOK}, "docker", nil},
		{"podman", "podman", Probes{no, engineOK}, "podman", nil},
		{"native missing", "native", Probes{no, engineOK}, "", []string{"no usable sandbox runtime (sandbox.runtime is native)", "native: user namespaces are disabled", "fix: run 'fluffy doctor'", "allow_degraded"}},
		{"auto, nothing", "auto", Probes{no, engineNo}, "", []string{"sandbox.runtime is auto", "native: user namespaces", "docker: docker engine does not answer"}},
		{"docker missing", "docker", Probes{ok, engineNo}, "", []string{"sandbox.runtime is docker", "docker: docker engine does not answer"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := DetectRuntime(t.Context(), c.want, c.p)
			if got != c.got {
				t.Errorf("runtime = %q, want %q (err %v)", got, c.got, err)
			}
			if c.msg == nil {
				if err != nil {
					t.Errorf("err = %v", err)
				}
				return
			}
			var se *bootstrap.StartError
			if !errors.As(err, &se) {
				t.Fatalf("err = %v, want a *bootstrap.StartError", err)
			}
			for _, m := range c.msg {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("message lacks %q:\n%v", m, err)
				}
			}
			if strings.Contains(err.Error(), "podman:") && c.want != "podman" {
				t.Errorf("auto tried podman:\n%v", err)
			}
		})
	}
}
