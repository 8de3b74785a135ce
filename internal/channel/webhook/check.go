package webhook

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/fluffy-agent/fluffy/internal/config"
	"github.com/fluffy-agent/fluffy/internal/units"
)

// validName is a hook's name: it is a URL path segment, a channel name
// in the audit log and part of the label the model sees.
var validName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// Check validates serve.webhooks for `fluffy serve --check` and before
// the hooks start: names (valid, unique), schemes, bounds, and that each
// secret reference resolves (without keeping the key). where is the
// origin of serve.webhooks (config.Loaded.Origins), so errors name its
// file and each entry's line. lookupEnv nil is os.LookupEnv.
func Check(hooks []config.Webhook, where config.Origin, lookupEnv func(string) (string, bool)) []error {
	if lookupEnv == nil {
		lookupEnv = os.LookupEnv
	}
	var errs []error
	seen := map[string]int{}
	for i, w := range hooks {
		errs = append(errs, checkHook(w, i, where)...)
		if j, ok := seen[w.Name]; ok && w.Name != "" {
			errs = append(errs, entryError(w, i, where, "name", fmt.Sprintf("%q is also the name of serve.webhooks[%d]", w.Name, j)))
		}
		seen[w.Name] = i
		if _, err := checkSecret(w.Secret, lookupEnv); err != nil && w.Secret != "" {
			// The key names the secret already; the reason is what helps.
			errs = append(errs, entryError(w, i, where, "secret", strings.TrimPrefix(err.Error(), ErrSecret.Error()+": ")))
		}
	}
	return errs
}

// checkHook checks one entry's values (not its secret's resolution).
func checkHook(w config.Webhook, i int, where config.Origin) []error {
	var errs []error
	bad := func(key, msg string) { errs = append(errs, entryError(w, i, where, key, msg)) }
	if !validName.MatchString(w.Name) {
		bad("name", fmt.Sprintf("%q: want 1 to 63 of a-z 0-9 _ - starting with a letter or digit", w.Name))
	}
	if w.Secret == "" {
		bad("secret", "required: a secret reference (secret://BACKEND/PATH, env:VAR or file:PATH)")
	}
	if w.Signature != SchemeGitHub && w.Signature != SchemeFluffy {
		bad("signature", fmt.Sprintf("%q: want %s or %s", w.Signature, SchemeGitHub, SchemeFluffy))
	}
	if w.MaxBody < 0 || w.MaxBody > MaxMaxBody {
		bad("max_body", fmt.Sprintf("%s: want at most %s (0: the default, %s)", w.MaxBody, units.Size(MaxMaxBody), units.Size(DefaultMaxBody)))
	}
	if d := w.Window.Std(); d < 0 || d > 0 && d < time.Second || d > MaxWindow {
		bad("window", fmt.Sprintf("%s: want 1s to %s (0: the default, %s)", w.Window, units.Duration(MaxWindow), units.Duration(DefaultWindow)))
	}
	return errs
}

// entryError locates a problem with key of entry i (i < 0: the entry
// named by its name): the file of serve.webhooks, the entry's own line.
func entryError(w config.Webhook, i int, where config.Origin, key, msg string) error {
	k := fmt.Sprintf("serve.webhooks[%d].%s", i, key)
	if i < 0 {
		k = fmt.Sprintf("serve.webhooks[name=%s].%s", w.Name, key)
	}
	return &config.Error{File: where.File, Line: w.Line, Column: w.Column, Env: where.Env, Key: k, Msg: msg}
}
