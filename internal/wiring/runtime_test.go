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
		p          probes
		got        string
		msg        []string
	}{
		{"native", "native", probes{ok, engineNo}, "native", nil},
		{"default is native", "", probes{ok, engineNo}, "native", nil},
		{"auto takes native first", "auto", probes{ok, engineOK}, "native", nil},
		{"auto falls back to docker", "auto", probes{no, engineOK}, "docker", nil},
		{"docker", "docker", probes{no, engineOK}, "docker", nil},
		{"podman", "podman", probes{no, engineOK}, "podman", nil},
		{"native missing", "native", probes{no, engineOK}, "", []string{"no usable sandbox runtime (sandbox.runtime is native)", "native: user namespaces are disabled", "fix: run 'fluffy doctor'", "allow_degraded"}},
		{"auto, nothing", "auto", probes{no, engineNo}, "", []string{"sandbox.runtime is auto", "native: user namespaces", "docker: docker engine does not answer"}},
		{"docker missing", "docker", probes{ok, engineNo}, "", []string{"sandbox.runtime is docker", "docker: docker engine does not answer"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := detectRuntime(t.Context(), c.want, c.p)
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
