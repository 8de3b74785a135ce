package sandboxd

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

// AskToReleaseAudit asks the process holding the audit log's writer lock
// to let go when it is a sandbox server of this user ("fluffy-core
// sandbox serve"), which keeps the log open between runs and closes it on
// SIGUSR1 unless a run is writing it. Any other holder is left alone:
// SIGUSR1 would kill a process that does not catch it.
func AskToReleaseAudit(pid int) {
	if pid <= 0 || pid == os.Getpid() {
		return
	}
	proc := "/proc/" + strconv.Itoa(pid)
	b, err := os.ReadFile(proc + "/cmdline")
	if err != nil {
		return
	}
	args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
	if len(args) < 3 || args[1] != "sandbox" || args[2] != "serve" {
		return
	}
	var st syscall.Stat_t
	if syscall.Stat(proc, &st) != nil || int(st.Uid) != os.Geteuid() {
		return
	}
	_ = syscall.Kill(pid, syscall.SIGUSR1)
}
