package sandboxtest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// IsProbe reports whether this process is the suite's probe inside a
// sandbox.
func IsProbe() bool { return os.Getenv("FLUFFY_SANDBOX_PROBE") == "1" }

// ProbeStarted is the first line of every attempt's output, the
// probe's and the script cases' alike: output without it means the
// attempt never ran (a Go probe that died at its start under a tight
// RLIMIT_AS, a shell that could not start), which is not a refusal.
const ProbeStarted = "sbxtest: started"

// ProbeRefusedExit is the probe's exit status when the kernel refused
// the attack. It is none of the statuses of a probe that did not get
// that far: a Go runtime's fatal error or panic exits 2, a failed exec
// 126 or 127, a kill is a signal.
const ProbeRefusedExit = 3

// ProbeMain performs the attack named by os.Args[1] after printing
// ProbeStarted; it exits 0, printing "succeeded", when the attack
// worked, and ProbeRefusedExit, printing "refused: ERRNO: message", when
// the kernel refused it.
func ProbeMain() int {
	fmt.Println(ProbeStarted)
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "probe: no action")
		return 2
	}
	err := probe(os.Args[1], os.Args[2:])
	if err != nil {
		name := "-"
		var e unix.Errno
		if errors.As(err, &e) {
			name = unix.ErrnoName(e)
		}
		fmt.Printf("refused: %s: %v\n", name, err)
		return ProbeRefusedExit
	}
	fmt.Println("succeeded")
	return 0
}

func probe(action string, args []string) error {
	switch action {
	case "connect":
		c, err := net.DialTimeout("tcp", args[0], 2*time.Second)
		if err == nil {
			c.Close()
		}
		return err
	case "ptrace":
		pid, _ := strconv.Atoi(args[0])
		_, _, e := unix.RawSyscall6(unix.SYS_PTRACE, unix.PTRACE_ATTACH, uintptr(pid), 0, 0, 0, 0)
		return errno(e)
	case "mount":
		return unix.Mount("tmpfs", "/tmp", "tmpfs", 0, "")
	case "unshare":
		return unix.Unshare(unix.CLONE_NEWUSER)
	case "setns":
		fd, err := unix.Open("/proc/1/ns/mnt", unix.O_RDONLY, 0)
		if err != nil {
			return err
		}
		return unix.Setns(fd, 0)
	case "clone-newuser":
		_, _, e := unix.RawSyscall6(unix.SYS_CLONE, unix.CLONE_NEWUSER|uintptr(unix.SIGCHLD), 0, 0, 0, 0, 0)
		return errno(e)
	case "keyctl":
		_, _, e := unix.RawSyscall6(unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, uintptr(0xfffffffd), 0, 0, 0, 0) // session keyring
		return errno(e)
	case "io_uring":
		params := make([]byte, 120)
		_, _, e := unix.RawSyscall(unix.SYS_IO_URING_SETUP, 4, uintptr(unsafe.Pointer(&params[0])), 0)
		return errno(e)
	case "bpf":
		attr := make([]byte, 128)
		_, _, e := unix.RawSyscall(unix.SYS_BPF, 0 /* BPF_MAP_CREATE */, uintptr(unsafe.Pointer(&attr[0])), 128)
		return errno(e)
	case "tiocsti", "tiocsti-high":
		// Even with a terminal handy, typing into it must fail. Use
		// stdin, whatever it is: seccomp refuses before the driver looks.
		c := byte('x')
		req := uintptr(unix.TIOCSTI)
		if action == "tiocsti-high" {
			req |= 1 << 32
		}
		_, _, e := unix.RawSyscall(unix.SYS_IOCTL, 0, req, uintptr(unsafe.Pointer(&c)))
		if e == unix.ENOTTY {
			fmt.Println("not refused by seccomp (ENOTTY from the driver)")
			return nil
		}
		return errno(e)
	case "sockets":
		// sockets FAMILY:TYPE...: raw numbers (a family may carry high
		// bits the kernel ignores); one line each; it worked if any
		// socket was made.
		var made []string
		for _, a := range args {
			f, ty, _ := strings.Cut(a, ":")
			fam, _ := strconv.ParseUint(f, 0, 64)
			typ, _ := strconv.ParseUint(ty, 0, 64)
			fd, _, e := unix.RawSyscall(unix.SYS_SOCKET, uintptr(fam), uintptr(typ), 0)
			if e == 0 {
				unix.Close(int(fd))
				made = append(made, a)
			}
			fmt.Printf("%s: %v\n", a, errno(e))
		}
		if len(made) > 0 {
			return nil
		}
		return errors.New("every socket refused")
	}
	return fmt.Errorf("unknown action %q", action)
}

func errno(e unix.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}
