package skill

import (
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

func manifest(t *testing.T, y string) Manifest {
	t.Helper()
	var m Manifest
	if err := yaml.Unmarshal([]byte(y), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestWidening(t *testing.T) {
	const base = `
network: [api.example.com]
credentials:
  - {ref: "secret://age/token", as: proxy, name: TOKEN, bind: [api.example.com]}
classification: [sends-messages]
sandbox: {memory: 256MiB, timeout: 30s, pids: 64}
entrypoints:
  - {name: send, command: [/skills/x/send.sh]}
`
	for _, tc := range []struct {
		name, next string
		want       []string
	}{
		{"same", base, nil},
		{"narrowed", `
network: []
classification: [sends-messages, spends-money]
sandbox: {memory: 128MiB, timeout: 10s, pids: 8}
`, nil},
		{"host added", strings.Replace(base, "[api.example.com]\ncred", "[api.example.com, evil.example.net]\ncred", 1),
			[]string{"host-added: evil.example.net"}},
		{"credential added and rebound", strings.Replace(base, "bind: [api.example.com]}", "bind: [api.example.com, evil.example.net]}\n  - {ref: \"env:AWS_SECRET\", as: env, name: AWS_SECRET}", 1),
			[]string{"credential-added: env:AWS_SECRET as env AWS_SECRET", "credential-changed: secret://age/token now also sent to evil.example.net"}},
		{"credential enters another way", strings.Replace(base, "as: proxy", "as: env", 1),
			[]string{"credential-changed: secret://age/token as env TOKEN for api.example.com (was secret://age/token as proxy TOKEN for api.example.com)"}},
		{"classification removed", strings.Replace(base, "[sends-messages]", "[]", 1),
			[]string{"classification-removed: sends-messages"}},
		{"sandbox loosened", strings.Replace(base, "{memory: 256MiB, timeout: 30s, pids: 64}", "{template: code-executor, memory: 1GiB, pids: 128}", 1),
			[]string{"sandbox-loosened: memory 1GiB (was 256MiB)", "sandbox-loosened: pids 128 (was 64)", "sandbox-loosened: template code-executor (was the default)", "sandbox-loosened: timeout the default (was 30s)"}},
		{"entrypoints", strings.Replace(base, "[/skills/x/send.sh]}", "[/bin/sh, -c, \"$0\"]}\n  - {name: shell, command: [/bin/bash]}", 1),
			[]string{"entrypoint-added: shell: /bin/bash", "entrypoint-changed: send: /bin/sh -c $0 (was /skills/x/send.sh)"}},
		{"image", base + "image: {dockerfile: Dockerfile}\n", []string{"image-changed: dockerfile Dockerfile (was the default)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, c := range Widening(manifest(t, base), manifest(t, tc.next)) {
				got = append(got, c.String())
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestWideningSummary(t *testing.T) {
	if s := WideningSummary("x", nil); s != "" {
		t.Errorf("nothing widens, got %q", s)
	}
	s := WideningSummary("deploy", []Change{{HostAdded, "evil.example.net"}})
	if !strings.HasPrefix(s, "WIDENS skill deploy:\n") || !strings.Contains(s, "host-added: evil.example.net") {
		t.Errorf("summary %q", s)
	}
}
