package sandbox

import (
	"encoding/json"
	"fmt"
	"math/bits"
	"runtime"
	"slices"
	"sort"
	"syscall"
)

// Seccomp profiles are a blocklist over a default-allow policy: the
// namespaces, landlock and the dropped capabilities do the confinement; the
// filter removes kernel attack surface and the calls that would undo the
// confinement (new namespaces, mounts, ptrace, keyrings, BPF, io_uring,
// terminal injection). They are data: assembled to BPF at build time for the
// native backend (Profile.BPF) and a container backend exports the same definition as
// Docker/OCI JSON (Profile.DockerJSON).

// ArgOp compares one syscall argument.
type ArgOp string

// Argument comparisons.
const (
	OpEqual    ArgOp = "eq"       // arg == Value
	OpNotEqual ArgOp = "ne"       // arg != Value
	OpGreater  ArgOp = "gt"       // arg > Value
	OpBitsSet  ArgOp = "bits-set" // arg & Value != 0
)

// Arg is a condition on argument Index (0-5). All Args of a Rule must hold.
type Arg struct {
	Index uint32 `json:"index"`
	Op    ArgOp  `json:"op"`
	Value uint64 `json:"value"`
}

// Rule denies the named syscalls (when all Args hold) with Errno.
type Rule struct {
	Names []string `json:"names"`
	Args  []Arg    `json:"args,omitempty"`
	// Errno is returned instead of running the call.
	Errno syscall.Errno `json:"errno"`
	// Why says what the rule protects against.
	Why string `json:"why"`
}

// Profile is a named seccomp policy.
type Profile struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Rules       []Rule `json:"rules"`
}

// Linux constants used by the rules (x86_64 and arm64 agree on these).
const (
	cloneNewNS     = 0x00020000
	cloneNewCgroup = 0x02000000
	cloneNewUTS    = 0x04000000
	cloneNewIPC    = 0x08000000
	cloneNewUser   = 0x10000000
	cloneNewPID    = 0x20000000
	cloneNewNet    = 0x40000000
	cloneNewTime   = 0x00000080
	cloneNamespace = cloneNewNS | cloneNewCgroup | cloneNewUTS | cloneNewIPC | cloneNewUser | cloneNewPID | cloneNewNet | cloneNewTime

	tiocsti   = 0x5412
	tioclinux = 0x541C

	afUnix  = 1
	afInet  = 2
	afInet6 = 10

	// personality flags that weaken ASLR or memory protections.
	perDangerous = 0x0040000 | 0x0400000 | 0x0100000 | 0x0200000 | 0x8000000 // ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC, MMAP_PAGE_ZERO, ADDR_COMPAT_LAYOUT, ADDR_LIMIT_3GB
)

// baseRules are shared by every profile.
func baseRules() []Rule {
	eperm := syscall.EPERM
	return []Rule{
		{Names: []string{"ptrace", "process_vm_readv", "process_vm_writev", "kcmp"}, Errno: eperm, Why: "no tracing or reading other processes' memory"},
		{Names: []string{"mount", "umount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr"}, Errno: eperm, Why: "the filesystem view is fixed"},
		{Names: []string{"unshare", "setns"}, Errno: eperm, Why: "no new or foreign namespaces"},
		{Names: []string{"clone"}, Args: []Arg{{Index: 0, Op: OpBitsSet, Value: cloneNamespace}}, Errno: eperm, Why: "clone may not create namespaces"},
		{Names: []string{"clone3"}, Errno: syscall.ENOSYS, Why: "clone3 flags live in memory a filter cannot read; ENOSYS makes libc fall back to clone"},
		{Names: []string{"keyctl", "add_key", "request_key"}, Errno: eperm, Why: "kernel keyrings are shared with the host user"},
		{Names: []string{"bpf", "perf_event_open", "userfaultfd"}, Errno: eperm, Why: "kernel attack surface"},
		{Names: []string{"io_uring_setup", "io_uring_enter", "io_uring_register"}, Errno: syscall.ENOSYS, Why: "io_uring bypasses seccomp for the calls it carries"},
		{Names: []string{"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "create_module", "query_module", "reboot", "swapon", "swapoff", "acct", "syslog", "iopl", "ioperm", "vhangup", "quotactl", "lookup_dcookie", "nfsservctl", "uselib", "_sysctl", "fanotify_init"}, Errno: eperm, Why: "system administration"},
		{Names: []string{"name_to_handle_at", "open_by_handle_at"}, Errno: eperm, Why: "file handles bypass the mount view"},
		{Names: []string{"settimeofday", "stime", "clock_settime", "clock_adjtime", "adjtimex"}, Errno: eperm, Why: "the clock is the host's"},
		{Names: []string{"personality"}, Args: []Arg{{Index: 0, Op: OpBitsSet, Value: perDangerous}}, Errno: eperm, Why: "no personality that weakens ASLR or memory protection"},
		{Names: []string{"ioctl"}, Args: []Arg{{Index: 1, Op: OpEqual, Value: tiocsti}}, Errno: eperm, Why: "no typing into a terminal (TIOCSTI)"},
		{Names: []string{"ioctl"}, Args: []Arg{{Index: 1, Op: OpEqual, Value: tioclinux}}, Errno: eperm, Why: "no console control (TIOCLINUX)"},
		{Names: []string{"ioctl"}, Args: []Arg{{Index: 1, Op: OpGreater, Value: 0xffffffff}}, Errno: eperm, Why: "the kernel ignores the high half of an ioctl request: refuse it so the rules above cannot be dodged"},
	}
}

// socketFamilies returns the rule that refuses socket and socketpair for
// every address family but the allowed ones, with EAFNOSUPPORT, which
// libraries take as "this family does not exist here" (glibc's
// getaddrinfo then assumes both IPv4 and IPv6 without asking netlink).
// An allowlist, so that AF_NETLINK, AF_PACKET, AF_KEY, AF_ALG, AF_VSOCK,
// AF_BLUETOOTH and the families the kernel adds later stay refused. The
// comparisons are on all 64 bits while the kernel reads the family as a
// 32-bit int: a family with high bits set matches no allowed one and is
// refused, so it cannot pass for one.
func socketFamilies(why string, allowed ...uint64) Rule {
	r := Rule{Names: []string{"socket", "socketpair"}, Errno: syscall.EAFNOSUPPORT, Why: why}
	for _, f := range allowed {
		r.Args = append(r.Args, Arg{Index: 0, Op: OpNotEqual, Value: f})
	}
	return r
}

// Profiles returns the built-in profiles: strict, standard, standard-net.
func Profiles() []Profile {
	strict := Profile{
		Name:        "strict",
		Description: "base rules; sockets other than AF_UNIX refused",
		Rules:       append(baseRules(), socketFamilies("only local (AF_UNIX) sockets", afUnix)),
	}
	standard := Profile{
		Name:        "standard",
		Description: "base rules; sockets other than AF_UNIX refused (no IP, netlink, packet, ... sockets)",
		Rules:       append(baseRules(), socketFamilies("no network: only local (AF_UNIX) sockets", afUnix)),
	}
	standardNet := Profile{
		Name:        "standard-net",
		Description: "base rules; AF_UNIX, AF_INET and AF_INET6 sockets allowed (reachability is the network namespace's and the proxy's business); every other family (netlink, packet, ...) refused",
		Rules:       append(baseRules(), socketFamilies("only local and IP sockets", afUnix, afInet, afInet6)),
	}
	return []Profile{strict, standard, standardNet}
}

// ProfileByName returns a built-in profile.
func ProfileByName(name string) (Profile, error) {
	for _, p := range Profiles() {
		if p.Name == name {
			return p, nil
		}
	}
	return Profile{}, fmt.Errorf("unknown seccomp profile %q (have strict, standard, standard-net)", name)
}

// BPF returns the profile's classic BPF program for the running
// architecture, 8 bytes per instruction in native byte order, ready for
// seccomp(SECCOMP_SET_MODE_FILTER). A syscall made through another
// architecture's entry point (i386 int 0x80 on x86_64) kills the process;
// x32 calls fail with ENOSYS.
//
// The programs are assembled at build time (go generate; package
// seccompbpf holds the assembler and the syscall tables) into
// seccomp_bpf.go, so no fluffy process builds BPF or loads syscall tables
// at run time; seccompbpf's tests fail when the file no longer matches the
// definitions above.
func (p Profile) BPF() ([]byte, error) { return p.BPFFor(runtime.GOARCH) }

// BPFFor is BPF for goarch ("amd64", "arm64").
func (p Profile) BPFFor(goarch string) ([]byte, error) {
	prog, ok := seccompPrograms[goarch][p.Name]
	if !ok {
		return nil, fmt.Errorf("seccomp: no program for profile %q on %s (run go generate ./internal/sandbox)", p.Name, goarch)
	}
	return []byte(prog), nil
}

//go:generate go run ./seccompbpf/gen -o seccomp_bpf.go

// dockerProfile is the Docker / OCI seccomp JSON format.
type dockerProfile struct {
	DefaultAction string          `json:"defaultAction"`
	Architectures []string        `json:"architectures"`
	Syscalls      []dockerSyscall `json:"syscalls"`
}

type dockerSyscall struct {
	Names    []string    `json:"names"`
	Action   string      `json:"action"`
	ErrnoRet *uint       `json:"errnoRet,omitempty"`
	Args     []dockerArg `json:"args,omitempty"`
	Comment  string      `json:"comment,omitempty"`
}

type dockerArg struct {
	Index    uint32 `json:"index"`
	Value    uint64 `json:"value"`
	ValueTwo uint64 `json:"valueTwo"`
	Op       string `json:"op"`
}

// notInSet reports whether args say "argument idx is none of vals"
// (two or more not-equal conditions on one argument, nothing else) and
// returns the values sorted; only small values (an enumeration such as
// address families) qualify.
func notInSet(args []Arg) (idx uint32, vals []uint64, ok bool) {
	if len(args) < 2 {
		return 0, nil, false
	}
	for _, a := range args {
		if a.Op != OpNotEqual || a.Index != args[0].Index || a.Value > 1024 {
			return 0, nil, false
		}
		vals = append(vals, a.Value)
	}
	slices.Sort(vals)
	return args[0].Index, slices.Compact(vals), true
}

var dockerArches = map[string]string{"amd64": "SCMP_ARCH_X86_64", "arm64": "SCMP_ARCH_AARCH64"}

// DockerJSON exports the profile in the Docker / OCI seccomp format for
// goarch ("amd64", "arm64"; "" means the running one). libseccomp allows
// one comparison per argument and cannot test "any of these bits", so a
// bits-set condition becomes one rule per bit (arg & bit == bit): the same
// set of refused calls.
func (p Profile) DockerJSON(goarch string) ([]byte, error) {
	if goarch == "" {
		goarch = runtime.GOARCH
	}
	da, ok := dockerArches[goarch]
	if !ok {
		return nil, fmt.Errorf("seccomp: no Docker architecture for %q", goarch)
	}
	out := dockerProfile{DefaultAction: "SCMP_ACT_ALLOW", Architectures: []string{da}}
	for _, r := range p.Rules {
		errno := uint(r.Errno)
		base := dockerSyscall{Names: slices.Clone(r.Names), Action: "SCMP_ACT_ERRNO", ErrnoRet: &errno, Comment: r.Why}
		sort.Strings(base.Names)
		if idx, vals, ok := notInSet(r.Args); ok {
			// libseccomp compares an argument once per rule: "none of
			// these values" becomes one rule per value between them and
			// one for those above.
			for v := uint64(0); v < vals[len(vals)-1]; v++ {
				if !slices.Contains(vals, v) {
					s := base
					s.Args = []dockerArg{{Index: idx, Value: v, Op: "SCMP_CMP_EQ"}}
					out.Syscalls = append(out.Syscalls, s)
				}
			}
			s := base
			s.Args = []dockerArg{{Index: idx, Value: vals[len(vals)-1], Op: "SCMP_CMP_GT"}}
			out.Syscalls = append(out.Syscalls, s)
			continue
		}
		// Expand bits-set conditions (at most one per rule here).
		variants := [][]dockerArg{nil}
		for _, a := range r.Args {
			var alts []dockerArg
			switch a.Op {
			case OpEqual:
				alts = []dockerArg{{Index: a.Index, Value: a.Value, Op: "SCMP_CMP_EQ"}}
			case OpNotEqual:
				alts = []dockerArg{{Index: a.Index, Value: a.Value, Op: "SCMP_CMP_NE"}}
			case OpGreater:
				alts = []dockerArg{{Index: a.Index, Value: a.Value, Op: "SCMP_CMP_GT"}}
			case OpBitsSet:
				for v := a.Value; v != 0; v &= v - 1 {
					bit := uint64(1) << bits.TrailingZeros64(v)
					alts = append(alts, dockerArg{Index: a.Index, Value: bit, ValueTwo: bit, Op: "SCMP_CMP_MASKED_EQ"})
				}
			default:
				return nil, fmt.Errorf("seccomp: unknown op %q", a.Op)
			}
			var next [][]dockerArg
			for _, v := range variants {
				for _, alt := range alts {
					next = append(next, append(slices.Clone(v), alt))
				}
			}
			variants = next
		}
		for _, v := range variants {
			s := base
			s.Args = v
			out.Syscalls = append(out.Syscalls, s)
		}
	}
	return json.MarshalIndent(out, "", "  ")
}
