package email

import (
	"errors"
	"strings"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/config"
)

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*config.Email)
		want string // "" for no error; else a substring of the one error
	}{
		{"valid", func(*config.Email) {}, ""},
		{"off", func(c *config.Email) { *c = config.Email{} }, ""},
		{"no port", func(c *config.Email) { c.Listen = "127.0.0.1" }, "serve.email.listen"},
		{"bad port", func(c *config.Email) { c.Listen = "127.0.0.1:smtp" }, "serve.email.listen"},
		{"port range", func(c *config.Email) { c.Listen = ":70000" }, "serve.email.listen"},
		{"no address", func(c *config.Email) { c.Address = "" }, "serve.email.address: required"},
		{"display name", func(c *config.Email) { c.Address = "Assistant <a@example.org>" }, "serve.email.address"},
		{"no senders", func(c *config.Email) { c.AllowedSenders = nil }, "serve.email.allowed_senders: required"},
		{"wildcard sender", func(c *config.Email) { c.AllowedSenders = []string{"me@example.org", "*@example.org"} }, "entry 2"},
		{"domain sender", func(c *config.Email) { c.AllowedSenders = []string{"@example.org"} }, "entry 1"},
		{"size", func(c *config.Email) { c.MaxSize = 0 }, "serve.email.max_size"},
		{"authserv", func(c *config.Email) { c.AuthServID = "mx.example.org; spf=pass" }, "serve.email.authserv_id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			tc.edit(&cfg)
			errs := Check(cfg, nil)
			switch {
			case tc.want == "" && len(errs) > 0:
				t.Errorf("errors for a valid configuration: %v", errs)
			case tc.want != "" && (len(errs) != 1 || !strings.Contains(errs[0].Error(), tc.want)):
				t.Errorf("errors %v, want one containing %q", errs, tc.want)
			}
			if _, err := New(cfg, Options{StateDir: t.TempDir()}); (err == nil) != (tc.want == "" && cfg.Listen != "") {
				t.Errorf("New: %v", err)
			}
		})
	}
}

func TestCheckLocatesErrors(t *testing.T) {
	cfg := testConfig()
	cfg.AllowedSenders = []string{"me at example.org"}
	origins := map[string]config.Origin{"serve.email.allowed_senders": {Layer: config.LayerUser, File: "/home/me/.config/fluffy/config.yaml", Line: 12, Column: 5}}
	errs := Check(cfg, origins)
	var ce *config.Error
	if len(errs) != 1 || !errors.As(errs[0], &ce) {
		t.Fatalf("errors %v", errs)
	}
	if got := ce.Error(); !strings.HasPrefix(got, "/home/me/.config/fluffy/config.yaml:12:5: serve.email.allowed_senders: entry 1") {
		t.Errorf("error %q does not start with file:line:column and the key", got)
	}
}
