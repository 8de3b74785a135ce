package seccompbpf

import (
	"bytes"
	"encoding/binary"
	"os"
	"syscall"
	"testing"

	"golang.org/x/net/bpf"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
)

// TestGeneratedUpToDate fails when internal/sandbox/seccomp_bpf.go no
// longer matches the profiles' Go definitions (or the assembler): run go
// generate ./internal/sandbox.
func TestGeneratedUpToDate(t *testing.T) {
	want, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../seccomp_bpf.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("internal/sandbox/seccomp_bpf.go is stale: run go generate ./internal/sandbox")
	}
	for _, goarch := range Arches() {
		for _, p := range sandbox.Profiles() {
			asm, err := Assemble(p, goarch)
			if err != nil {
				t.Fatal(err)
			}
			pre, err := p.BPFFor(goarch)
			if err != nil || !bytes.Equal(asm, pre) {
				t.Errorf("%s/%s: the precompiled program differs from the definition (%v)", goarch, p.Name, err)
			}
		}
	}
}

// TestPrograms runs the generated x86_64 programs in x/net/bpf's virtual
// machine on seccomp_data records and checks the verdicts.
func TestPrograms(t *testing.T) {
	const (
		auditArchX8664 = 0xc000003e
		auditArchI386  = 0x40000003
		allow          = 0x7fff0000
		kill           = 0x80000000
		errno          = 0x00050000
	)
	type call struct {
		arch uint32
		nr   uint32
		args [6]uint64
	}
	x := func(nr uint32, args ...uint64) call {
		c := call{arch: auditArchX8664, nr: nr}
		copy(c.args[:], args)
		return c
	}
	for _, tc := range []struct {
		profile string
		name    string
		c       call
		want    uint32
	}{
		{"standard", "read", x(0), allow},
		{"standard", "ptrace", x(101), errno | uint32(syscall.EPERM)},
		{"standard", "mount", x(165), errno | uint32(syscall.EPERM)},
		{"standard", "unshare", x(272), errno | uint32(syscall.EPERM)},
		{"standard", "clone without namespace flags", x(56, 0x11), allow},
		{"standard", "clone with CLONE_NEWUSER", x(56, 0x10000000), errno | uint32(syscall.EPERM)},
		{"standard", "clone3", x(435), errno | uint32(syscall.ENOSYS)},
		{"standard", "io_uring_setup", x(425), errno | uint32(syscall.ENOSYS)},
		{"standard", "ioctl TIOCSTI", x(16, 0, 0x5412), errno | uint32(syscall.EPERM)},
		{"standard", "ioctl TIOCSTI with high bits", x(16, 0, 1<<32|0x5412), errno | uint32(syscall.EPERM)},
		{"standard", "ioctl TCGETS", x(16, 0, 0x5401), allow},
		{"standard", "keyctl after a failed ioctl condition", x(250), errno | uint32(syscall.EPERM)},
		{"standard", "socket AF_UNIX", x(41, 1), allow},
		{"standard", "socket AF_INET", x(41, 2), errno | uint32(syscall.EAFNOSUPPORT)},
		{"standard", "socket AF_INET6", x(41, 10), errno | uint32(syscall.EAFNOSUPPORT)},
		{"standard-net", "socket AF_INET", x(41, 2), allow},
		{"standard-net", "socket AF_PACKET", x(41, 17), errno | uint32(syscall.EPERM)},
		{"strict", "socket AF_UNIX", x(41, 1), allow},
		{"strict", "socket AF_NETLINK", x(41, 16), errno | uint32(syscall.EAFNOSUPPORT)},
		{"standard", "x32 call", x(0x40000000), errno | uint32(syscall.ENOSYS)},
		{"standard", "i386 entry point", call{arch: auditArchI386, nr: 1}, kill},
	} {
		t.Run(tc.profile+"/"+tc.name, func(t *testing.T) {
			p, err := sandbox.ProfileByName(tc.profile)
			if err != nil {
				t.Fatal(err)
			}
			raw, err := p.BPFFor("amd64")
			if err != nil {
				t.Fatal(err)
			}
			var prog []bpf.Instruction
			for i := 0; i+8 <= len(raw); i += 8 {
				ri := bpf.RawInstruction{Op: binary.LittleEndian.Uint16(raw[i:]), Jt: raw[i+2], Jf: raw[i+3], K: binary.LittleEndian.Uint32(raw[i+4:])}
				prog = append(prog, ri.Disassemble())
			}
			vm, err := bpf.NewVM(prog)
			if err != nil {
				t.Fatal(err)
			}
			// seccomp_data: nr, arch, instruction pointer, six arguments. The
			// VM loads words big endian, the kernel in native order: store
			// each 32-bit word big endian so both read the same values.
			data := binary.BigEndian.AppendUint32(nil, tc.c.nr)
			data = binary.BigEndian.AppendUint32(data, tc.c.arch)
			data = binary.BigEndian.AppendUint64(data, 0)
			for _, a := range tc.c.args {
				data = binary.BigEndian.AppendUint32(data, uint32(a))     // low half first (little endian u64)
				data = binary.BigEndian.AppendUint32(data, uint32(a>>32)) // then the high half
			}
			got, err := vm.Run(data)
			if err != nil {
				t.Fatal(err)
			}
			if uint32(got) != tc.want {
				t.Errorf("verdict %#x, want %#x", uint32(got), tc.want)
			}
		})
	}
}
