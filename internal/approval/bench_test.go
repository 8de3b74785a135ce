package approval

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/policy"
)

// BenchmarkMint: one approved shell step becomes its token.
func BenchmarkMint(b *testing.B) {
	rp := newRealPolicy(b, grantRules, nil)
	g, err := NewGrants(GrantOptions{Issuer: rp.tokens, Now: rp.clock.now})
	if err != nil {
		b.Fatal(err)
	}
	req := Request{ID: "x", Session: "s", Items: []Item{{N: 1, Step: Step{Op: shellOp("s", "rm", "-rf", "build")},
		Eval: Evaluation{Effect: EffectApprove, Rule: "destructive"}, Decision: Decision{Verdict: Approved}}}}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := g.Mint(req, rp.engine.Digest()); err != nil {
			b.Fatal(err)
		}
		g.EndSession("s")
	}
}

// BenchmarkDecidePresented: Decide of an approved operation with the
// session's N held tokens presented (the covering one is the last).
func BenchmarkDecidePresented(b *testing.B) {
	for _, n := range []int{1, 16, 128} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			rp := newRealPolicy(b, grantRules, nil)
			g, err := NewGrants(GrantOptions{Issuer: rp.tokens, Uses: 1 << 30, TTL: time.Hour, Now: rp.clock.now})
			if err != nil {
				b.Fatal(err)
			}
			for i := range n {
				argv := []string{"rm", "-rf", fmt.Sprintf("build%d", i)}
				if i == n-1 {
					argv = []string{"rm", "-rf", "build"}
				}
				req := Request{Session: "s", Items: []Item{{N: 1, Step: Step{Op: shellOp("s", argv...)},
					Eval: Evaluation{Effect: EffectApprove}, Decision: Decision{Verdict: Approved}}}}
				if _, _, err := g.Mint(req, rp.engine.Digest()); err != nil {
					b.Fatal(err)
				}
			}
			ctx := b.Context()
			b.ReportAllocs()
			for b.Loop() {
				op := shellOp("s", "rm", "-rf", "build")
				g.Present(&op)
				if d := rp.engine.Decide(ctx, op); d.Effect != policy.Allow {
					b.Fatal(d)
				}
			}
		})
	}
}

func BenchmarkParseVerdict(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseVerdict(" VERDICT: no\n"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBindInputs: what binding a typical command's files costs the
// router on every call that runs something (here from memory: the cost
// of the rule and the hashing, not of the change set's lookups).
func BenchmarkBindInputs(b *testing.B) {
	src := memSource{"/w/x.py": strings.Repeat("print(1)\n", 400), "/w/sub/": ""}
	op := lineOp(b, "s1", "cd sub && PYTHONPATH=lib python3 ../x.py --out=res.txt > log.txt", src)
	b.ReportAllocs()
	for b.Loop() {
		BindInputs(&op, src)
		_ = op.Signature()
	}
}
