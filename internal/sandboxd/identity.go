package sandboxd

import (
	"bytes"
	"fmt"
	"os"
	"strings"
)

// identity is what, beyond the uid, makes a process's commands run the way
// they do, and what a process could shed to confine itself: a client must
// not get, through the server, a command run with more than it has (a
// process in a mount, network or user namespace of its own, under
// no_new_privs or seccomp, with capabilities dropped or other groups), nor
// with less (a server started by a confined client must not serve the
// others). Clients of different identities use different sockets (the
// socket's name hashes it) and the server refuses a peer whose identity
// is not its own; the client then runs the command itself.
//
// Not covered (not visible in /proc, or not a confinement): landlock
// domains, cgroups, resource limits, the terminal; docs/sandbox-server.md
// says so.
type identity struct {
	Umask  string // the server's children create files with it
	Gid    string // effective gid
	Groups string
	CapEff string
	CapBnd string
	NNP    string // no_new_privs
	Secomp string // seccomp mode
	NS     [len(nsNames)]string
}

// nsNames are the namespaces an identity compares.
var nsNames = [...]string{"user", "mnt", "pid", "net", "ipc", "uts", "cgroup"}

// readIdentity reads the identity of the process whose /proc directory is
// proc ("/proc/self", "/proc/123").
func readIdentity(proc string) (identity, error) {
	var id identity
	b, err := os.ReadFile(proc + "/status")
	if err != nil {
		return id, fmt.Errorf("sandboxd: process identity: %w", err)
	}
	fields := map[string]*string{"Umask": &id.Umask, "Gid": &id.Gid, "Groups": &id.Groups, "CapEff": &id.CapEff,
		"CapBnd": &id.CapBnd, "NoNewPrivs": &id.NNP, "Seccomp": &id.Secomp}
	seen := 0
	for line := range bytes.Lines(b) {
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		if p, ok := fields[string(k)]; ok {
			*p = strings.TrimSpace(string(v))
			seen++
		}
	}
	if seen != len(fields) || id.Umask == "" {
		return id, fmt.Errorf("sandboxd: process identity: %s/status lacks a field (Linux 4.7 or later needed)", proc)
	}
	if g := strings.Fields(id.Gid); len(g) >= 2 {
		id.Gid = g[1]
	}
	for i, ns := range nsNames {
		if id.NS[i], err = os.Readlink(proc + "/ns/" + ns); err != nil {
			return id, fmt.Errorf("sandboxd: process identity: %w", err)
		}
	}
	return id, nil
}

// diff names the fields in which a and b differ, comma-separated ("" if
// none).
func (a identity) diff(b identity) string {
	var d []string
	for _, f := range []struct {
		name string
		x, y string
	}{
		{"umask", a.Umask, b.Umask},
		{"group", a.Gid, b.Gid},
		{"supplementary groups", a.Groups, b.Groups},
		{"effective capabilities", a.CapEff, b.CapEff},
		{"capability bounding set", a.CapBnd, b.CapBnd},
		{"no_new_privs", a.NNP, b.NNP},
		{"seccomp mode", a.Secomp, b.Secomp},
	} {
		if f.x != f.y {
			d = append(d, f.name)
		}
	}
	for i := range a.NS {
		if a.NS[i] != b.NS[i] {
			d = append(d, nsNames[i]+" namespace")
		}
	}
	return strings.Join(d, ", ")
}

// key is the identity's bytes for the socket name's hash.
func (a identity) key() string {
	return strings.Join(append([]string{a.Umask, a.Gid, a.Groups, a.CapEff, a.CapBnd, a.NNP, a.Secomp}, a.NS[:]...), "\x00")
}
