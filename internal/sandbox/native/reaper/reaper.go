// Package reaper holds the native sandbox's reaper for direct starts: a
// static Linux program of a few dozen instructions, with no libc and no
// Go runtime, that PID 1 of a sandbox executes once the command runs
// (see package native, direct_linux.go). It reaps every process until the
// command ends, kills what is left, and reports the command's wait
// status, whether /tmp filled up, and the state of a throw-away change
// set kept in memory. Written in assembly
// (reaper_amd64.asm), built by gen.sh and embedded; architectures
// without one start sandboxes through the Go init instead.
package reaper

import "encoding/binary"

// Report is what the reaper writes to its status descriptor: 16 bytes,
// four native-order 32-bit words.
type Report struct {
	// WaitStatus is the command's wait status (valid when Reaped).
	WaitStatus uint32
	// Reaped says the reaper saw the command end.
	Reaped bool
	// TmpFull says the sandbox's /tmp had no block left at the end.
	TmpFull bool
	// UpperFull says the file system of UpperFD (a throw-away change
	// set's tmpfs, seen through the workspace's overlay) had no block or
	// no inode left at the end; UpperInodes is its inodes in use then (0
	// when UpperFD is not open).
	UpperFull   bool
	UpperInodes uint32
}

// ReportSize is the size of a report.
const ReportSize = 16

// Descriptors the reaper reads the command's pid from and writes its
// report to.
const (
	PidFD    = 6
	StatusFD = 4
	// UpperFD, when open, is the workspace of a throw-away change set
	// kept in memory, whose file system the reaper reports on.
	UpperFD = 7
)

// ParseReport decodes a report.
func ParseReport(b []byte) (Report, bool) {
	if len(b) != ReportSize {
		return Report{}, false
	}
	return Report{
		WaitStatus:  binary.NativeEndian.Uint32(b[0:]),
		Reaped:      binary.NativeEndian.Uint32(b[4:]) == 1,
		TmpFull:     binary.NativeEndian.Uint32(b[8:])&1 != 0,
		UpperFull:   binary.NativeEndian.Uint32(b[8:])&2 != 0,
		UpperInodes: binary.NativeEndian.Uint32(b[12:]),
	}, true
}
