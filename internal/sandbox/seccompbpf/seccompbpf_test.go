package seccompbpf

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"os"
	"syscall"
	"testing"

	"github.com/elastic/go-seccomp-bpf/arch"
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
		{"standard", "socket AF_INET with high bits", x(41, 1<<32|2), errno | uint32(syscall.EAFNOSUPPORT)},
		{"standard", "socket AF_NETLINK", x(41, 16), errno | uint32(syscall.EAFNOSUPPORT)},
		{"standard", "socket AF_PACKET", x(41, 17), errno | uint32(syscall.EAFNOSUPPORT)},
		{"standard", "socket AF_UNSPEC", x(41, 0), errno | uint32(syscall.EAFNOSUPPORT)},
		{"standard", "socketpair AF_UNIX", x(53, 1), allow},
		{"standard", "socketpair AF_NETLINK", x(53, 16), errno | uint32(syscall.EAFNOSUPPORT)},
		{"standard-net", "socket AF_INET", x(41, 2), allow},
		{"standard-net", "socket AF_INET6", x(41, 10), allow},
		{"standard-net", "socket AF_UNIX", x(41, 1), allow},
		{"standard-net", "socket AF_PACKET", x(41, 17), errno | uint32(syscall.EAFNOSUPPORT)},
		{"standard-net", "socket AF_NETLINK", x(41, 16), errno | uint32(syscall.EAFNOSUPPORT)},
		{"standard-net", "socket AF_KEY", x(41, 15), errno | uint32(syscall.EAFNOSUPPORT)},
		{"standard-net", "socket AF_X25 (between the allowed)", x(41, 9), errno | uint32(syscall.EAFNOSUPPORT)},
		{"standard-net", "socket AF_VSOCK", x(41, 40), errno | uint32(syscall.EAFNOSUPPORT)},
		{"standard-net", "socket AF_NETLINK passed as AF_UNIX with high bits", x(41, 1<<32|16), errno | uint32(syscall.EAFNOSUPPORT)},
		{"standard-net", "socket AF_UNIX with high bits", x(41, 1<<32|1), errno | uint32(syscall.EAFNOSUPPORT)},
		{"strict", "socket AF_UNIX", x(41, 1), allow},
		{"strict", "socket AF_INET", x(41, 2), errno | uint32(syscall.EAFNOSUPPORT)},
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
			vm, _ := vmFor(t, raw)
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

// verdict is the reference semantics of a profile, straight from its
// definition: the first rule whose syscall and argument conditions match
// decides; none allows.
func verdict(p sandbox.Profile, info *arch.Info, goarch string, nr uint32, args [6]uint64) uint32 {
	if goarch == "amd64" && nr >= 0x40000000 {
		return retErrno | uint32(syscall.ENOSYS)
	}
	for _, r := range p.Rules {
		for _, n := range r.Names {
			if x, ok := info.SyscallNames[n]; !ok || uint32(x) != nr {
				continue
			}
			match := true
			for _, a := range r.Args {
				v := args[a.Index]
				switch a.Op {
				case sandbox.OpEqual:
					match = match && v == a.Value
				case sandbox.OpNotEqual:
					match = match && v != a.Value
				case sandbox.OpGreater:
					match = match && v > a.Value
				case sandbox.OpBitsSet:
					match = match && v&a.Value != 0
				}
			}
			if match {
				return retErrno | uint32(r.Errno)
			}
		}
	}
	return retAllow
}

// vmFor loads a raw program (8 bytes per instruction, little endian) into
// x/net/bpf's virtual machine.
func vmFor(t *testing.T, raw []byte) (*bpf.VM, int) {
	t.Helper()
	var prog []bpf.Instruction
	for i := 0; i+8 <= len(raw); i += 8 {
		ri := bpf.RawInstruction{Op: binary.LittleEndian.Uint16(raw[i:]), Jt: raw[i+2], Jf: raw[i+3], K: binary.LittleEndian.Uint32(raw[i+4:])}
		prog = append(prog, ri.Disassemble())
	}
	vm, err := bpf.NewVM(prog)
	if err != nil {
		t.Fatal(err)
	}
	return vm, len(prog)
}

// seccompData lays out a seccomp_data record for the VM (see TestPrograms).
func seccompData(archID, nr uint32, args [6]uint64) []byte {
	data := binary.BigEndian.AppendUint32(nil, nr)
	data = binary.BigEndian.AppendUint32(data, archID)
	data = binary.BigEndian.AppendUint64(data, 0)
	for _, a := range args {
		data = binary.BigEndian.AppendUint32(data, uint32(a))
		data = binary.BigEndian.AppendUint32(data, uint32(a>>32))
	}
	return data
}

// TestProgramsMatchDefinition runs every generated program, for both
// architectures, on every syscall number up to 1024 (and x32 and foreign
// architecture calls), with argument values around every value a rule
// compares against, and checks each verdict against the profile's
// definition (verdict).
func TestProgramsMatchDefinition(t *testing.T) {
	var values []uint64
	for _, p := range sandbox.Profiles() {
		for _, r := range p.Rules {
			for _, a := range r.Args {
				v := a.Value
				values = append(values, v, v+1, v-1, v|1<<32, v^1<<63, v&0xffffffff, v>>32, v<<32, v&(v-1))
			}
		}
	}
	values = append(values, 0, 1, ^uint64(0), 1<<32, 0xffffffff, 1<<63)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, goarch := range Arches() {
		info := arches[goarch]
		for _, p := range sandbox.Profiles() {
			raw, err := p.BPFFor(goarch)
			if err != nil {
				t.Fatal(err)
			}
			vm, _ := vmFor(t, raw)
			check := func(archID, nr uint32, args [6]uint64, want uint32) {
				t.Helper()
				got, err := vm.Run(seccompData(archID, nr, args))
				if err != nil {
					t.Fatal(err)
				}
				if uint32(got) != want {
					t.Fatalf("%s/%s: nr %d args %#x: verdict %#x, want %#x", goarch, p.Name, nr, args, uint32(got), want)
				}
			}
			// The numbers some rule compares arguments of get every value
			// at every index; the others a few random argument vectors.
			withArgs := map[uint32]bool{}
			for _, r := range p.Rules {
				for _, n := range r.Names {
					if x, ok := info.SyscallNames[n]; ok && len(r.Args) > 0 {
						withArgs[uint32(x)] = true
					}
				}
			}
			for nr := uint32(0); nr < 1024; nr++ {
				var args [6]uint64
				check(uint32(info.ID), nr, args, verdict(p, info, goarch, nr, args))
				for i := range 6 {
					if !withArgs[nr] {
						break
					}
					for _, v := range values {
						args := [6]uint64{}
						args[i] = v
						check(uint32(info.ID), nr, args, verdict(p, info, goarch, nr, args))
					}
				}
				for range 5 {
					for i := range args {
						args[i] = values[rng.IntN(len(values))]
					}
					check(uint32(info.ID), nr, args, verdict(p, info, goarch, nr, args))
				}
			}
			if goarch == "amd64" {
				for _, nr := range []uint32{0x40000000, 0x40000000 + 59, 0xffffffff} {
					check(uint32(info.ID), nr, [6]uint64{}, retErrno|uint32(syscall.ENOSYS))
				}
			}
			for _, other := range []uint32{0x40000003, 0xc00000b7, 0xc000003e} {
				if other != uint32(info.ID) {
					check(other, 1, [6]uint64{}, retKillProcess)
				}
			}
		}
	}
}

// TestProgramPaths bounds the longest path through each program: the
// kernel runs the filter on the sandbox's system calls and emulates it
// for every syscall number when the sandbox starts.
func TestProgramPaths(t *testing.T) {
	for _, goarch := range Arches() {
		for _, p := range sandbox.Profiles() {
			raw, err := p.BPFFor(goarch)
			if err != nil {
				t.Fatal(err)
			}
			longest := 0
			var walk func(pc, n int)
			walk = func(pc, n int) {
				for ; pc < len(raw)/8; pc++ {
					n++
					op := binary.LittleEndian.Uint16(raw[pc*8:])
					jt, jf := int(raw[pc*8+2]), int(raw[pc*8+3])
					k := int(binary.LittleEndian.Uint32(raw[pc*8+4:]))
					switch {
					case op&0x07 == 0x06: // BPF_RET
						longest = max(longest, n)
						return
					case op == 0x05: // BPF_JMP|BPF_JA
						pc += k
					case op&0x07 == 0x05: // conditional jump
						walk(pc+1+jt, n)
						pc += jf
					}
				}
				t.Fatalf("%s/%s: a path runs off the end", goarch, p.Name)
			}
			walk(0, 0)
			t.Logf("%s/%s: %d instructions, longest path %d", goarch, p.Name, len(raw)/8, longest)
			if longest > 40 {
				t.Errorf("%s/%s: longest path %d instructions, want <= 40", goarch, p.Name, longest)
			}
		}
	}
}
