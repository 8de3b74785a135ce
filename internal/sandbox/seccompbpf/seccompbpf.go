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
	"slices"
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
// The verdict is the first rule, in the profile's order, whose syscall
// and argument conditions match; none means allow. The program finds a
// syscall's rules by a binary search over the syscall numbers that have
// any (a dozen instructions on any path, not one test per rule): the
// kernel runs the filter on every system call the sandbox makes that its
// cache cannot answer, and emulates it for every syscall number when the
// filter is loaded (to build that cache), so the path length is paid at
// every sandbox start. A syscall's rules with argument conditions are a
// chain tested in order; a failed condition moves to the next rule of the
// same syscall, never skipping one (github.com/elastic/go-seccomp-bpf
// v1.6.0 did: the tiocsti-high-bits case of the adversarial suite).
//
// The syscall table comes from github.com/elastic/go-seccomp-bpf/arch.
func Assemble(p sandbox.Profile, goarch string) ([]byte, error) {
	info, ok := arches[goarch]
	if !ok {
		return nil, fmt.Errorf("seccomp: no syscall table for %q", goarch)
	}
	prog := []bpf.Instruction{
		bpf.LoadAbsolute{Off: 4, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(info.ID), SkipTrue: 1},
		bpf.RetConstant{Val: retKillProcess},
		bpf.LoadAbsolute{Off: 0, Size: 4},
	}
	if goarch == "amd64" {
		prog = append(prog,
			bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: 0x40000000, SkipFalse: 1},
			bpf.RetConstant{Val: retErrno | uint32(syscall.ENOSYS)},
		)
	}
	// Each syscall's rules, in the profile's order; nothing after an
	// unconditional one can match.
	chains := map[uint32][]link{}
	for _, r := range p.Rules {
		if r.Errno == 0 {
			return nil, fmt.Errorf("seccomp: profile %s: rule for %v has no errno", p.Name, r.Names)
		}
		for _, n := range r.Names {
			nr, ok := info.SyscallNames[n]
			if !ok {
				continue
			}
			c := chains[uint32(nr)]
			if len(c) > 0 && len(c[len(c)-1].args) == 0 {
				continue
			}
			chains[uint32(nr)] = append(c, link{name: n, args: r.Args, ret: retErrno | uint32(r.Errno)})
		}
	}
	nrs := make([]uint32, 0, len(chains))
	for nr := range chains {
		nrs = append(nrs, nr)
	}
	slices.Sort(nrs)
	body, err := search(nrs, chains)
	if err != nil {
		return nil, fmt.Errorf("seccomp: profile %s: %w", p.Name, err)
	}
	prog = append(prog, body...)
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

// link is one rule of a syscall's chain: return ret if all args hold.
type link struct {
	name string
	args []sandbox.Arg
	ret  uint32
}

// leafSize is the most syscall numbers a leaf of the search tests one
// after the other.
const leafSize = 4

// search returns the code that, with the syscall number in A, runs the
// chain of the number's rules, or allows a number that has none. nrs is
// sorted. Every path ends in a return.
func search(nrs []uint32, chains map[uint32][]link) ([]bpf.Instruction, error) {
	if len(nrs) <= leafSize {
		var ins []bpf.Instruction
		for _, nr := range nrs {
			code, err := chainCode(chains[nr])
			if err != nil {
				return nil, err
			}
			if len(code) > 255 {
				return nil, fmt.Errorf("the rules of syscall %d are too long (%d instructions)", nr, len(code))
			}
			ins = append(ins, bpf.JumpIf{Cond: bpf.JumpEqual, Val: nr, SkipFalse: uint8(len(code))})
			ins = append(ins, code...)
		}
		return append(ins, bpf.RetConstant{Val: retAllow}), nil
	}
	mid := len(nrs) / 2
	left, err := search(nrs[:mid], chains)
	if err != nil {
		return nil, err
	}
	right, err := search(nrs[mid:], chains)
	if err != nil {
		return nil, err
	}
	// A >= nrs[mid]: the right half; else the left half, which follows.
	var ins []bpf.Instruction
	if len(left) <= 255 {
		ins = append(ins, bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: nrs[mid], SkipTrue: uint8(len(left))})
	} else {
		ins = append(ins, bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: nrs[mid], SkipFalse: 1}, bpf.Jump{Skip: uint32(len(left))})
	}
	ins = append(ins, left...)
	return append(ins, right...), nil
}

// chainCode tests a syscall's rules in order and returns the first
// match's verdict, or allows when none matches.
func chainCode(chain []link) ([]bpf.Instruction, error) {
	var ins []bpf.Instruction
	for _, l := range chain {
		if len(l.args) == 0 {
			return append(ins, bpf.RetConstant{Val: l.ret}), nil
		}
		block, err := argBlock(l.args, l.ret)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", l.name, err)
		}
		ins = append(ins, block...)
	}
	return append(ins, bpf.RetConstant{Val: retAllow}), nil
}

// argBlock compiles "if all args match, return ret" into a self-contained
// block: every failed test jumps to the instruction after the block.
func argBlock(args []sandbox.Arg, ret uint32) ([]bpf.Instruction, error) {
	type fail struct {
		at     int
		onTrue bool
	}
	var ins []bpf.Instruction
	var fails []fail
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
