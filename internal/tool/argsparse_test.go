package tool

import (
	"reflect"
	"strings"
	"testing"
)

var parseSeeds = []string{
	`{}`, ` {"path": "pkg/calc.go"} `, `{"a":1,"b":[1,2.5,-0,1e3,-1E-2],"c":{"d":null,"e":true,"f":false}}`,
	`{"s":"tab\tx"}`, `{"s":"esc\"aped\\ \u00e9 \ud83d\ude00 \/"}`, `{"s":"raw é 😀"}`, "{\"s\":\"bad \xff utf8\"}",
	`{"s":"\ud800 lone"}`, `{"a":1,"a":2}`, `{"a":1,}`, `[1,]`, `{"a" 1}`, `{"a":01}`, `{"a":1.}`, `{"a":.5}`,
	`{"a":1e400}`, `{"a":-}`, `{"a":tru}`, `{"a":truex}`, `{} {}`, `{}x`, ``, ` `, `"x"`, `[]`, `null`, `nul`,
	`{"a":"` + "\x01" + `"}`, `{"a":"unterminated`, `{"a":"\`, `{"a":"\q"}`, `{"a":"\u12"}`,
	strings.Repeat(`[`, 64) + `1` + strings.Repeat(`]`, 64), strings.Repeat(`[`, 65) + `1` + strings.Repeat(`]`, 65),
	strings.Repeat(`{"a":`, 64) + `{}` + strings.Repeat(`}`, 64), strings.Repeat(`{"a":`, 65) + `{}` + strings.Repeat(`}`, 65),
	`{"":0}`, `{"\u0061":1,"a":2}`, "{\"a\":1}\n", "\ufeff{}",
	`{"path":"a","PATH":"/etc/passwd"}`, `{"a":{"b":1,"c":2,"B":3}}`, `{"k":1,"\u212a":2}`, `{"s":1,"ſ":2}`, `{"é":1,"É":2}`,
	`[{"a":1},{"A":1}]`, `{"ab":1,"aB":2}`,
}

// checkParsers: fastParse accepts only what tokenParse accepts, with
// the same value; when fastParse declines, strictParse gives
// tokenParse's answer.
func checkParsers(t *testing.T, in string) {
	t.Helper()
	fv, fok := fastParse([]byte(in))
	tv, terr := tokenParse([]byte(in))
	if fok {
		if terr != nil {
			t.Fatalf("%q: fastParse accepted what tokenParse refuses (%v)", in, terr)
		}
		if !reflect.DeepEqual(fv, tv) {
			t.Fatalf("%q: fastParse %#v, tokenParse %#v", in, fv, tv)
		}
	}
	sv, serr := strictParse([]byte(in))
	if (serr == nil) != (terr == nil) || serr != nil && serr.Error() != terr.Error() || !reflect.DeepEqual(sv, tv) {
		t.Fatalf("%q: strictParse %#v, %v; tokenParse %#v, %v", in, sv, serr, tv, terr)
	}
}

func TestStrictParseAgrees(t *testing.T) {
	accepted := 0
	for _, in := range parseSeeds {
		checkParsers(t, in)
		if _, ok := fastParse([]byte(in)); ok {
			accepted++
		}
	}
	if accepted < 10 {
		t.Fatalf("fastParse accepted only %d seeds: it is not being exercised", accepted)
	}
}

func FuzzStrictParse(f *testing.F) {
	for _, s := range parseSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) { checkParsers(t, in) })
}
