package sandboxd

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// identity is what, beyond the uid, makes a process's commands run the way
// they do, and what a process could shed to confine itself: a client must
// not get, through the server, a command run with more than it has (a
// process in a mount, network or user namespace of its own, under
// no_new_privs or seccomp filters, with capabilities dropped, other
// groups, lower resource limits or in another cgroup), nor with less (a
// server started by a confined client must not serve the others).
// Clients of different identities use different sockets (the socket's
// name hashes it) and the server refuses a peer whose identity is not
// its own; the client then runs the command itself.
//
// Seccomp is compared by mode and by the number of filters stacked
// (Seccomp_filters, Linux 5.9): filters are only ever added, and a
// process inherits its parent's, so a client that stacked one more on
// the server's stack has more (a stack of its own of the same height is
// not told apart: /proc shows no more). Not covered here (not visible in /proc): landlock domains and
// other LSM confinement, which the client proves it lacks another way
// (see proveReach); the terminal. docs/sandbox-server.md says so.
type identity struct {
	Umask  string // the server's children create files with it
	Uid    string // real, effective, saved and file-system uids
	Gid    string // real, effective, saved and file-system gids
	Groups string
	CapEff string
	CapPrm string
	CapInh string
	CapBnd string
	CapAmb string
	NNP    string // no_new_privs
	Secomp string // seccomp mode
	// Filters is the number of seccomp filters (empty before Linux 5.9,
	// where the kernel does not say; the mode still counts).
	Filters string
	// Limits is /proc/PID/limits, soft and hard: a server started
	// without a client's ulimit must not lift it.
	Limits string
	// Cgroup is /proc/PID/cgroup: a command the server runs is charged
	// to the server's cgroups and held by their limits.
	Cgroup string
	NS     [len(nsNames)]string
}

// nsNames are the namespaces an identity compares.
var nsNames = [...]string{"user", "mnt", "pid", "net", "ipc", "uts", "cgroup", "time"}

// readIdentity reads the identity of the process whose /proc directory is
// proc ("/proc/self", "/proc/123").
func readIdentity(proc string) (identity, error) {
	var id identity
	b, err := os.ReadFile(proc + "/status")
	if err != nil {
		return id, fmt.Errorf("sandboxd: process identity: %w", err)
	}
	fields := map[string]*string{"Umask": &id.Umask, "Uid": &id.Uid, "Gid": &id.Gid, "Groups": &id.Groups, "CapEff": &id.CapEff,
		"CapPrm": &id.CapPrm, "CapInh": &id.CapInh, "CapBnd": &id.CapBnd, "CapAmb": &id.CapAmb,
		"NoNewPrivs": &id.NNP, "Seccomp": &id.Secomp}
	seen := 0
	for line := range bytes.Lines(b) {
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		if string(k) == "Seccomp_filters" {
			id.Filters = strings.TrimSpace(string(v))
			continue
		}
		if p, ok := fields[string(k)]; ok {
			*p = strings.Join(strings.Fields(string(v)), " ")
			seen++
		}
	}
	if seen != len(fields) || id.Umask == "" {
		return id, fmt.Errorf("sandboxd: process identity: %s/status lacks a field (Linux 4.7 or later needed)", proc)
	}
	for _, f := range []struct {
		name string
		to   *string
	}{{"limits", &id.Limits}, {"cgroup", &id.Cgroup}} {
		b, err := os.ReadFile(proc + "/" + f.name)
		if err != nil {
			return id, fmt.Errorf("sandboxd: process identity: %w", err)
		}
		*f.to = string(b)
	}
	for i, ns := range nsNames {
		if id.NS[i], err = os.Readlink(proc + "/ns/" + ns); err != nil {
			if ns == "time" && errors.Is(err, fs.ErrNotExist) {
				continue // before Linux 5.6
			}
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
		{"user ids", a.Uid, b.Uid},
		{"group ids", a.Gid, b.Gid},
		{"supplementary groups", a.Groups, b.Groups},
		{"effective capabilities", a.CapEff, b.CapEff},
		{"permitted capabilities", a.CapPrm, b.CapPrm},
		{"inheritable capabilities", a.CapInh, b.CapInh},
		{"capability bounding set", a.CapBnd, b.CapBnd},
		{"ambient capabilities", a.CapAmb, b.CapAmb},
		{"no_new_privs", a.NNP, b.NNP},
		{"seccomp mode", a.Secomp, b.Secomp},
		{"seccomp filters", a.Filters, b.Filters},
		{"resource limits", a.Limits, b.Limits},
		{"cgroups", a.Cgroup, b.Cgroup},
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
	return strings.Join(append([]string{a.Umask, a.Uid, a.Gid, a.Groups, a.CapEff, a.CapPrm, a.CapInh, a.CapBnd, a.CapAmb,
		a.NNP, a.Secomp, a.Filters, a.Limits, a.Cgroup}, a.NS[:]...), "\x00")
}
