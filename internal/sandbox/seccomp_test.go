package sandbox

import (
	"encoding/json"
	"slices"
	"syscall"
	"testing"
)

// TestSocketFamilies: each profile allows exactly its socket families,
// in the BPF definitions and in the Docker export alike, whatever the
// high half of the argument holds.
func TestSocketFamilies(t *testing.T) {
	allowed := map[string][]uint64{
		"strict":       {afUnix},
		"standard":     {afUnix},
		"standard-net": {afUnix, afInet, afInet6},
	}
	for _, p := range Profiles() {
		t.Run(p.Name, func(t *testing.T) {
			want, ok := allowed[p.Name]
			if !ok {
				t.Fatalf("profile %s: no expectation", p.Name)
			}
			raw, err := p.DockerJSON("amd64")
			if err != nil {
				t.Fatal(err)
			}
			var dp dockerProfile
			if err := json.Unmarshal(raw, &dp); err != nil {
				t.Fatal(err)
			}
			var families []uint64
			for f := uint64(0); f < 64; f++ {
				families = append(families, f, 1<<32|f, 0xffffffff00000000|f)
			}
			for _, call := range []string{"socket", "socketpair"} {
				for _, f := range families {
					args := [6]uint64{f, 1, 0}
					allow := slices.Contains(want, f)
					errno, refused := ruleVerdict(p, call, args)
					if refused == allow || (refused && errno != syscall.EAFNOSUPPORT) {
						t.Errorf("%s(%#x): rules refuse=%v (%v), want refuse=%v with EAFNOSUPPORT", call, f, refused, errno, !allow)
					}
					if dockerRefuses(dp, call, args) == allow {
						t.Errorf("%s(%#x): Docker profile refuse=%v, want %v", call, f, !allow, !allow)
					}
				}
			}
		})
	}
}

// ruleVerdict is the rules' meaning: the first rule naming call whose
// conditions all hold refuses it with its errno.
func ruleVerdict(p Profile, call string, args [6]uint64) (syscall.Errno, bool) {
	for _, r := range p.Rules {
		if !slices.Contains(r.Names, call) {
			continue
		}
		hold := true
		for _, a := range r.Args {
			v := args[a.Index]
			switch a.Op {
			case OpEqual:
				hold = hold && v == a.Value
			case OpNotEqual:
				hold = hold && v != a.Value
			case OpGreater:
				hold = hold && v > a.Value
			case OpBitsSet:
				hold = hold && v&a.Value != 0
			}
		}
		if hold {
			return r.Errno, true
		}
	}
	return 0, false
}

// dockerRefuses is libseccomp's reading of the export: an entry naming
// call whose comparisons all hold refuses it.
func dockerRefuses(dp dockerProfile, call string, args [6]uint64) bool {
	for _, s := range dp.Syscalls {
		if !slices.Contains(s.Names, call) {
			continue
		}
		hold := true
		for _, a := range s.Args {
			v := args[a.Index]
			switch a.Op {
			case "SCMP_CMP_EQ":
				hold = hold && v == a.Value
			case "SCMP_CMP_NE":
				hold = hold && v != a.Value
			case "SCMP_CMP_GT":
				hold = hold && v > a.Value
			case "SCMP_CMP_MASKED_EQ":
				hold = hold && v&a.Value == a.ValueTwo
			default:
				hold = false
			}
		}
		if hold {
			return true
		}
	}
	return false
}
