// Package seccompbpf assembles fluffy's seccomp profiles (package
// sandbox's Go definitions) into classic BPF programs. It runs at build
// time only: go generate ./internal/sandbox writes the programs into
// internal/sandbox/seccomp_bpf.go, and this package's tests check that the
// file still matches the definitions. Keeping the assembler and the
// syscall tables (github.com/elastic/go-seccomp-bpf/arch, whose package
// initialisation builds maps of every architecture's syscalls) out of the
// fluffy binary spares every fluffy process that work.
package seccompbpf

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"go/format"
	"syscall"

	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
)

// arches are the architectures programs are generated for (both little
// endian: the programs are stored in that byte order).
var arches = map[string]*arch.Info{"amd64": arch.X86_64, "arm64": arch.AARCH64}

// Arches returns the GOARCH names Assemble supports, sorted.
func Arches() []string { return []string{"amd64", "arm64"} }

// Assemble assembles the profile for goarch ("amd64", "arm64") into a classic
// BPF program, 8 bytes per instruction in native byte order, ready for
// seccomp(SECCOMP_SET_MODE_FILTER). A syscall made through another
// architecture's entry point (i386 int 0x80 on x86_64) kills the process;
// x32 calls fail with ENOSYS. Names unknown on this architecture are
// skipped (they cannot be called).
//
// The syscall table comes from github.com/elastic/go-seccomp-bpf/arch; the
// program is generated here because that library's assembler (v1.6.0)
// does not reload the syscall number after an argument check fails, so a
// call that fails one rule's argument condition skips every later rule
// (found by the tiocsti-high-bits case of the adversarial suite). Here
// each rule starts by loading the syscall number again.
func Assemble(p sandbox.Profile, goarch string) ([]byte, error) {
	info, ok := arches[goarch]
	if !ok {
		return nil, fmt.Errorf("seccomp: no syscall table for %q", goarch)
	}
	prog := []bpf.Instruction{
		bpf.LoadAbsolute{Off: 4, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(info.ID), SkipTrue: 1},
		bpf.RetConstant{Val: retKillProcess},
	}
	if goarch == "amd64" {
		prog = append(prog,
			bpf.LoadAbsolute{Off: 0, Size: 4},
			bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: 0x40000000, SkipFalse: 1},
			bpf.RetConstant{Val: retErrno | uint32(syscall.ENOSYS)},
		)
	}
	for _, r := range p.Rules {
		if r.Errno == 0 {
			return nil, fmt.Errorf("seccomp: profile %s: rule for %v has no errno", p.Name, r.Names)
		}
		for _, n := range r.Names {
			nr, ok := info.SyscallNames[n]
			if !ok {
				continue
			}
			block, err := ruleBlock(uint32(nr), r.Args, retErrno|uint32(r.Errno))
			if err != nil {
				return nil, fmt.Errorf("seccomp: profile %s: %s: %w", p.Name, n, err)
			}
			prog = append(prog, block...)
		}
	}
	prog = append(prog, bpf.RetConstant{Val: retAllow})
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return nil, fmt.Errorf("seccomp: assemble %s: %w", p.Name, err)
	}
	if len(raw) > 4096 {
		return nil, fmt.Errorf("seccomp: profile %s is %d instructions, over the kernel's 4096", p.Name, len(raw))
	}
	out := make([]byte, 0, 8*len(raw))
	for _, ins := range raw {
		out = binary.LittleEndian.AppendUint16(out, ins.Op)
		out = append(out, ins.Jt, ins.Jf)
		out = binary.LittleEndian.AppendUint32(out, ins.K)
	}
	return out, nil
}

const (
	retKillProcess = 0x80000000
	retErrno       = 0x00050000
	retAllow       = 0x7fff0000
)

// ruleBlock compiles "if nr and all args match, return ret" into a
// self-contained block: every failed test jumps to the instruction after
// the block, which starts with its own load of the syscall number.
func ruleBlock(nr uint32, args []sandbox.Arg, ret uint32) ([]bpf.Instruction, error) {
	type fail struct {
		at     int
		onTrue bool
	}
	var ins []bpf.Instruction
	var fails []fail
	ins = append(ins, bpf.LoadAbsolute{Off: 0, Size: 4}, bpf.JumpIf{Cond: bpf.JumpEqual, Val: nr})
	fails = append(fails, fail{len(ins) - 1, false})
	for _, a := range args {
		if a.Index > 5 {
			return nil, fmt.Errorf("argument index %d", a.Index)
		}
		lo, hi := uint32(16+8*a.Index), uint32(16+8*a.Index+4) // little endian
		vlo, vhi := uint32(a.Value), uint32(a.Value>>32)
		switch a.Op {
		case sandbox.OpEqual:
			ins = append(ins, bpf.LoadAbsolute{Off: hi, Size: 4}, bpf.JumpIf{Cond: bpf.JumpEqual, Val: vhi})
			fails = append(fails, fail{len(ins) - 1, false})
			ins = append(ins, bpf.LoadAbsolute{Off: lo, Size: 4}, bpf.JumpIf{Cond: bpf.JumpEqual, Val: vlo})
			fails = append(fails, fail{len(ins) - 1, false})
		case sandbox.OpNotEqual:
			ins = append(ins, bpf.LoadAbsolute{Off: hi, Size: 4}, bpf.JumpIf{Cond: bpf.JumpEqual, Val: vhi, SkipFalse: 2},
				bpf.LoadAbsolute{Off: lo, Size: 4}, bpf.JumpIf{Cond: bpf.JumpEqual, Val: vlo})
			fails = append(fails, fail{len(ins) - 1, true})
		case sandbox.OpGreater:
			ins = append(ins, bpf.LoadAbsolute{Off: hi, Size: 4}, bpf.JumpIf{Cond: bpf.JumpGreaterThan, Val: vhi, SkipTrue: 3},
				bpf.JumpIf{Cond: bpf.JumpEqual, Val: vhi})
			fails = append(fails, fail{len(ins) - 1, false})
			ins = append(ins, bpf.LoadAbsolute{Off: lo, Size: 4}, bpf.JumpIf{Cond: bpf.JumpGreaterThan, Val: vlo})
			fails = append(fails, fail{len(ins) - 1, false})
		case sandbox.OpBitsSet:
			ins = append(ins, bpf.LoadAbsolute{Off: hi, Size: 4}, bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: vhi, SkipTrue: 2},
				bpf.LoadAbsolute{Off: lo, Size: 4}, bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: vlo})
			fails = append(fails, fail{len(ins) - 1, false})
		default:
			return nil, fmt.Errorf("unknown op %q", a.Op)
		}
	}
	ins = append(ins, bpf.RetConstant{Val: ret})
	end := len(ins)
	for _, f := range fails {
		skip := end - f.at - 1
		if skip > 255 {
			return nil, fmt.Errorf("rule too long")
		}
		j := ins[f.at].(bpf.JumpIf)
		if f.onTrue {
			j.SkipTrue = uint8(skip)
		} else {
			j.SkipFalse = uint8(skip)
		}
		ins[f.at] = j
	}
	return ins, nil
}

// Generate returns the Go source of internal/sandbox/seccomp_bpf.go: every
// built-in profile assembled for every architecture of Arches.
func Generate() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("// Code generated by go run ./seccompbpf/gen; DO NOT EDIT.\n\n")
	b.WriteString("package sandbox\n\n")
	b.WriteString("// seccompPrograms holds each profile's BPF program per GOARCH\n")
	b.WriteString("// (Profile.BPF), 8 bytes per instruction, little endian.\n")
	b.WriteString("var seccompPrograms = map[string]map[string]string{\n")
	for _, goarch := range Arches() {
		fmt.Fprintf(&b, "\t%q: {\n", goarch)
		for _, p := range sandbox.Profiles() {
			prog, err := Assemble(p, goarch)
			if err != nil {
				return nil, err
			}
			fmt.Fprintf(&b, "\t\t%q: \"", p.Name)
			for i, c := range prog {
				if i > 0 && i%8 == 0 {
					b.WriteString("\" +\n\t\t\t\"")
				}
				fmt.Fprintf(&b, "\\x%02x", c)
			}
			b.WriteString("\",\n")
		}
		b.WriteString("\t},\n")
	}
	b.WriteString("}\n")
	return format.Source(b.Bytes())
}
