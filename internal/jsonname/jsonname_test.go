package jsonname

import (
	"encoding/json"
	"testing"
)

// TestFold: names Fold makes equal are names encoding/json sets one field
// from (checked against the decoder itself), and names it keeps apart are
// not.
func TestFold(t *testing.T) {
	for _, tc := range []struct {
		member string
		same   bool // the same name as "sk" to encoding/json
	}{
		{"sk", true},
		{"SK", true},
		{"Sk", true},
		{"s\u212a", true}, // the Kelvin sign folds to k
		{"\u017fk", true}, // the long s folds to s
		{"sks", false},
		{"sl", false},
		{"ſſ", false},
	} {
		if got := Fold(tc.member) == Fold("sk"); got != tc.same {
			t.Errorf("Fold(%q) == Fold(\"sk\") is %v, want %v", tc.member, got, tc.same)
		}
		var v struct {
			X string `json:"sk"`
		}
		if err := json.Unmarshal([]byte(`{"`+tc.member+`":"x"}`), &v); err != nil {
			t.Fatal(err)
		}
		if got := v.X != ""; got != tc.same {
			t.Errorf("encoding/json sets field \"sk\" from member %q: %v; Fold says %v", tc.member, got, tc.same)
		}
	}
}

func FuzzFold(f *testing.F) {
	for _, s := range []string{"path", "PATH", "\u212a", "é", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if Fold(Fold(s)) != Fold(s) {
			t.Errorf("Fold is not idempotent on %q", s)
		}
	})
}
