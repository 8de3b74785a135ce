package netproxy

import (
	"errors"
	"net/netip"
	"testing"
)

func TestParseRule(t *testing.T) {
	tests := []struct {
		in      string
		want    string // String() of the parsed rule; "" means an error
		wantErr bool
	}{
		{in: "example.com", want: "example.com"},
		{in: "Example.COM.", want: "example.com"},
		{in: "example.com:8443", want: "example.com:8443"},
		{in: "example.com:*", want: "example.com:*"},
		{in: "*.example.com", want: "*.example.com"},
		{in: "*.example.com:443", want: "*.example.com:443"},
		{in: "127.0.0.1:8080", want: "127.0.0.1:8080"},
		{in: "[::1]:8080", want: "[::1]:8080"},
		{in: "::1", want: "::1"},
		{in: "[::ffff:127.0.0.1]:80", want: "127.0.0.1:80"},
		{in: "api_v2.example.com", want: "api_v2.example.com"},
		{in: "", wantErr: true},
		{in: "*", wantErr: true},
		{in: "*:443", wantErr: true},
		{in: "*.com", wantErr: true},
		{in: "a.*.example.com", wantErr: true},
		{in: "ex ample.com", wantErr: true},
		{in: "-bad.example.com", wantErr: true},
		{in: "example.com:0", wantErr: true},
		{in: "example.com:65536", wantErr: true},
		{in: "example.com:+80", wantErr: true},
		{in: "example.com:", wantErr: true},
		{in: "2130706433", wantErr: true},
		{in: "0177.0.0.1", wantErr: true},
		{in: "0x7f.0.0.1", wantErr: true},
		{in: "127.1", wantErr: true},
		{in: "example.0x10", wantErr: true},
		{in: "[fe80::1%eth0]:80", wantErr: true},
		{in: "[::1", wantErr: true},
		{in: "[::1]x", wantErr: true},
		{in: "example..com", wantErr: true},
		{in: "exa%6dple.com", wantErr: true},
	}
	for _, tt := range tests {
		r, err := ParseRule(tt.in)
		if tt.wantErr {
			if err == nil {
				t.Errorf("ParseRule(%q) = %v, want an error", tt.in, r)
			} else if !errors.Is(err, ErrBadRule) {
				t.Errorf("ParseRule(%q) error %v does not wrap ErrBadRule", tt.in, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseRule(%q): %v", tt.in, err)
			continue
		}
		if got := r.String(); got != tt.want {
			t.Errorf("ParseRule(%q).String() = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestRuleMatch(t *testing.T) {
	tests := []struct {
		rule      string
		authority string
		connect   bool
		want      bool
	}{
		{"example.com", "example.com", false, true},
		{"example.com", "example.com:80", false, true},
		{"example.com", "example.com:443", true, true},
		{"example.com", "example.com:443", false, false}, // plain HTTP to 443 needs a port rule
		{"example.com", "example.com:22", true, false},
		{"example.com", "EXAMPLE.com.:443", true, true},
		{"example.com", "www.example.com:443", true, false},
		{"example.com", "example.com.evil.net:443", true, false},
		{"example.com:8443", "example.com:8443", true, true},
		{"example.com:8443", "example.com:8443", false, true},
		{"example.com:8443", "example.com:443", true, false},
		{"example.com:*", "example.com:22", true, true},
		{"*.example.com", "api.example.com:443", true, true},
		{"*.example.com", "a.b.example.com:443", true, true},
		{"*.example.com", "example.com:443", true, false},
		{"*.example.com", "evilexample.com:443", true, false},
		{"127.0.0.1:8080", "127.0.0.1:8080", false, true},
		{"127.0.0.1:8080", "[::ffff:127.0.0.1]:8080", false, true},
		{"127.0.0.1:8080", "127.0.0.1:8081", false, false},
		{"127.0.0.1:8080", "localhost:8080", false, false},
		{"[::1]:8080", "[::1]:8080", true, true},
		{"[::1]:8080", "[0:0::1]:8080", true, true},
		{"example.com", "93.184.216.34:80", false, false}, // a name never matches an IP literal
	}
	for _, tt := range tests {
		r, err := ParseRule(tt.rule)
		if err != nil {
			t.Fatal(err)
		}
		def := 80
		if tt.connect {
			def = 443
		}
		tg, err := parseTarget(tt.authority, def, false)
		if err != nil {
			t.Fatalf("parseTarget(%q): %v", tt.authority, err)
		}
		if got := r.matches(tg); got != tt.want {
			t.Errorf("rule %q matches %q (connect=%v) = %v, want %v", tt.rule, tt.authority, tt.connect, got, tt.want)
		}
	}
}

func TestParseTargetRefusesAmbiguousForms(t *testing.T) {
	for _, in := range []string{
		"2130706433:80", "0177.0.0.1", "0x7f000001", "127.1", "017700000001",
		"[fe80::1%25eth0]:80", "[fe80::1%eth0]", "host name", "a..b", "", ":80",
		"example.com:0", "example.com:99999", "[::1]]:80", "exa$mple.com",
	} {
		if tg, err := parseTarget(in, 80, false); err == nil {
			t.Errorf("parseTarget(%q) = %v, want an error", in, tg)
		}
	}
	if _, err := parseTarget("example.com", 443, true); err == nil {
		t.Error("CONNECT target without a port accepted")
	}
}

func TestAddressClass(t *testing.T) {
	tests := []struct {
		ip, want string
	}{
		{"93.184.216.34", ""},
		{"2606:2800:220:1:248:1893:25c8:1946", ""},
		{"127.0.0.1", "loopback"},
		{"127.255.255.254", "loopback"},
		{"::1", "loopback"},
		{"::ffff:127.0.0.1", "loopback"},
		{"0.0.0.0", "unspecified"},
		{"0.1.2.3", "unspecified"},
		{"::", "unspecified"},
		{"10.1.2.3", "private"},
		{"172.16.0.1", "private"},
		{"172.31.255.255", "private"},
		{"172.32.0.1", ""},
		{"192.168.1.1", "private"},
		{"fd12::1", "private"},
		{"::ffff:10.0.0.1", "private"},
		{"169.254.169.254", "metadata"},
		{"fd00:ec2::254", "metadata"},
		{"169.254.1.1", "link-local"},
		{"fe80::1", "link-local"},
		{"100.100.100.200", "shared (CGNAT)"},
		{"224.0.0.1", "multicast"},
		{"ff02::1", "multicast"},
		{"255.255.255.255", "broadcast"},
		{"240.0.0.1", "reserved"},
		{"192.0.2.1", "documentation"},
		{"2001:db8::1", "documentation"},
		{"198.18.0.1", "benchmarking"},
		{"64:ff9b::7f00:1", "loopback (via NAT64)"},
		{"64:ff9b::a9fe:a9fe", "metadata (via NAT64)"},
		{"64:ff9b::5db8:d822", ""},
		{"2002:7f00:1::", "loopback (via 6to4)"},
		{"2002:a00:1::1", "private (via 6to4)"},
	}
	for _, tt := range tests {
		if got := addressClass(netip.MustParseAddr(tt.ip)); got != tt.want {
			t.Errorf("addressClass(%s) = %q, want %q", tt.ip, got, tt.want)
		}
	}
}

// FuzzParseRule checks that every accepted rule prints to a form that
// parses back to the same rule.
func FuzzParseRule(f *testing.F) {
	for _, s := range []string{"example.com", "*.example.com:443", "[::1]:80", "127.0.0.1:*", "0177.1", "a.b:99", "[fe80::1%x]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRule(s)
		if err != nil {
			return
		}
		r2, err := ParseRule(r.String())
		if err != nil {
			t.Fatalf("ParseRule(%q) ok, but its String %q does not parse: %v", s, r.String(), err)
		}
		if r != r2 {
			t.Fatalf("round trip of %q: %+v != %+v", s, r, r2)
		}
	})
}

// FuzzParseTarget checks that an accepted target is canonical: it parses
// back to itself and an IP literal is never refused for its spelling.
func FuzzParseTarget(f *testing.F) {
	for _, s := range []string{"example.com:443", "[::ffff:127.0.0.1]:80", "2130706433", "0x7f.1", "a.b.c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tg, err := parseTarget(s, 80, false)
		if err != nil {
			return
		}
		tg2, err := parseTarget(tg.hostPort(), 80, false)
		if err != nil {
			t.Fatalf("parseTarget(%q) ok, but %q does not parse: %v", s, tg.hostPort(), err)
		}
		if tg2 != tg {
			t.Fatalf("round trip of %q: %+v != %+v", s, tg, tg2)
		}
		if tg.ip.IsValid() && tg.ip.Is4In6() {
			t.Fatalf("target %q keeps a mapped address %v", s, tg.ip)
		}
	})
}
