// Package reaper holds the native sandbox's reaper for direct starts: a
// static Linux program of a few dozen instructions, with no libc and no
// Go runtime, that PID 1 of a sandbox executes once the command runs
// (see package native, direct_linux.go). It reaps every process until the
// command ends, kills what is left, and reports the command's wait
// status and whether /tmp filled up. Written in assembly
// (reaper_amd64.asm), built by gen.sh and embedded; architectures
// without one start sandboxes through the Go init instead.
package reaper

import "encoding/binary"

// Report is what the reaper writes to its status descriptor: 12 bytes,
// three native-order 32-bit words.
type Report struct {
	// WaitStatus is the command's wait status (valid when Reaped).
	WaitStatus uint32
	// Reaped says the reaper saw the command end.
	Reaped bool
	// TmpFull says the sandbox's /tmp had no block left at the end.
	TmpFull bool
}

// ReportSize is the size of a report.
const ReportSize = 12

// Descriptors the reaper reads the command's pid from and writes its
// report to.
const (
	PidFD    = 6
	StatusFD = 4
)

// ParseReport decodes a report.
func ParseReport(b []byte) (Report, bool) {
	if len(b) != ReportSize {
		return Report{}, false
	}
	return Report{
		WaitStatus: binary.NativeEndian.Uint32(b[0:]),
		Reaped:     binary.NativeEndian.Uint32(b[4:]) == 1,
		TmpFull:    binary.NativeEndian.Uint32(b[8:]) == 1,
	}, true
}
