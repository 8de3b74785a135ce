package netproxy

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Rule is one entry of an allow-list. Its text form is
//
//	host            example.com: ports 80 (HTTP) and 443 (CONNECT) only
//	host:port       example.com:8443: that port only, HTTP or CONNECT
//	host:*          any port
//	*.domain[:port] any name below domain (not domain itself)
//	IP[:port]       an address literal, [v6] in brackets when a port follows
//
// A rule naming an IP literal is the only way to reach a loopback, private,
// link-local or otherwise non-public address: that exact address becomes
// "explicitly allowed". A name never unlocks such an address, whatever it
// resolves to.
type Rule struct {
	// Host is the lower-case name without any "*." prefix, or "" for an
	// IP rule.
	Host string
	// Wildcard makes Host match its subdomains (and only them).
	Wildcard bool
	// IP is set for an IP-literal rule.
	IP netip.Addr
	// Port is the port the rule allows; 0 means the default ports (80 for
	// HTTP, 443 for CONNECT) and AnyPort means every port.
	Port int
}

// AnyPort in Rule.Port allows every port.
const AnyPort = -1

// ErrBadRule is wrapped by every ParseRule error.
var ErrBadRule = errors.New("bad allow-list rule")

// ParseRule parses one allow-list entry (see Rule). It refuses what it
// cannot read unambiguously: a bare "*", wildcards in the middle, numeric
// host forms that are not canonical IP literals (2130706433, 0177.0.0.1),
// IPv6 zones, and ports out of range.
func ParseRule(s string) (Rule, error) {
	orig := s
	bad := func(why string) (Rule, error) {
		return Rule{}, fmt.Errorf("%w %q: %s", ErrBadRule, orig, why)
	}
	s = strings.TrimSpace(s)
	if s == "" {
		return bad("empty")
	}
	host, portText, hasPort, err := splitHostPortOpt(s)
	if err != nil {
		return bad(err.Error())
	}
	var r Rule
	if hasPort {
		if portText == "*" {
			r.Port = AnyPort
		} else {
			p, err := parsePort(portText)
			if err != nil {
				return bad(err.Error())
			}
			r.Port = p
		}
	}
	if ip, ok, err := parseIPLiteral(host); err != nil {
		return bad(err.Error())
	} else if ok {
		r.IP = ip.Unmap()
		return r, nil
	}
	if strings.HasPrefix(host, "*.") {
		r.Wildcard = true
		host = host[2:]
	}
	name, err := canonicalName(host)
	if err != nil {
		return bad(err.Error())
	}
	if r.Wildcard && !strings.Contains(name, ".") {
		return bad("a wildcard must name a domain with at least two labels (*.example.com)")
	}
	r.Host = name
	return r, nil
}

// String returns the rule in the form ParseRule reads.
func (r Rule) String() string {
	var h string
	switch {
	case r.IP.IsValid():
		h = r.IP.String()
		if r.IP.Is6() && r.Port != 0 {
			h = "[" + h + "]"
		}
	case r.Wildcard:
		h = "*." + r.Host
	default:
		h = r.Host
	}
	switch r.Port {
	case 0:
		return h
	case AnyPort:
		return h + ":*"
	default:
		return h + ":" + strconv.Itoa(r.Port)
	}
}

// matches reports whether the rule allows host (already canonical: a
// lower-case name, or an IP literal in ip) on port for the given kind of
// request.
func (r Rule) matches(t target) bool {
	switch r.Port {
	case AnyPort:
	case 0:
		if t.port != t.defaultPort {
			return false
		}
	default:
		if t.port != r.Port {
			return false
		}
	}
	if r.IP.IsValid() {
		return t.ip.IsValid() && t.ip == r.IP
	}
	if t.ip.IsValid() {
		return false
	}
	if r.Wildcard {
		return strings.HasSuffix(t.host, "."+r.Host)
	}
	return t.host == r.Host
}

// AllowList is an ordered set of rules; the first match wins. The zero
// value allows nothing.
type AllowList struct {
	rules []Rule
}

// ParseAllowList parses each entry with ParseRule.
func ParseAllowList(entries []string) (AllowList, error) {
	var al AllowList
	for _, e := range entries {
		r, err := ParseRule(e)
		if err != nil {
			return AllowList{}, err
		}
		al.rules = append(al.rules, r)
	}
	return al, nil
}

// NewAllowList builds an allow-list from parsed rules.
func NewAllowList(rules ...Rule) AllowList {
	return AllowList{rules: append([]Rule(nil), rules...)}
}

// Rules returns a copy of the rules.
func (a AllowList) Rules() []Rule { return append([]Rule(nil), a.rules...) }

func (a AllowList) match(t target) (Rule, bool) {
	for _, r := range a.rules {
		if r.matches(t) {
			return r, true
		}
	}
	return Rule{}, false
}

// target is a parsed request destination.
type target struct {
	host        string     // canonical name, or the IP's text form
	ip          netip.Addr // set when the request named an IP literal
	port        int
	defaultPort int // 80 for HTTP, 443 for CONNECT
}

func (t target) hostPort() string {
	h := t.host
	if t.ip.Is6() {
		h = "[" + h + "]"
	}
	return h + ":" + strconv.Itoa(t.port)
}

// parseTarget reads a request's destination: an authority "host[:port]"
// (port required when requirePort is set, as for CONNECT).
func parseTarget(authority string, defaultPort int, requirePort bool) (target, error) {
	host, portText, hasPort, err := splitHostPortOpt(authority)
	if err != nil {
		return target{}, err
	}
	t := target{port: defaultPort, defaultPort: defaultPort}
	if hasPort {
		p, err := parsePort(portText)
		if err != nil {
			return target{}, err
		}
		t.port = p
	} else if requirePort {
		return target{}, errors.New("missing port")
	}
	ip, ok, err := parseIPLiteral(host)
	if err != nil {
		return target{}, err
	}
	if ok {
		ip = ip.Unmap() // ::ffff:a.b.c.d is a.b.c.d
		t.ip = ip
		t.host = ip.String()
		return t, nil
	}
	name, err := canonicalName(host)
	if err != nil {
		return target{}, err
	}
	t.host = name
	return t, nil
}

// splitHostPortOpt splits "host", "host:port", "[v6]", "[v6]:port" and a
// bare IPv6 literal (no port) apart.
func splitHostPortOpt(s string) (host, port string, hasPort bool, err error) {
	if s == "" {
		return "", "", false, errors.New("empty host")
	}
	if s[0] == '[' {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", "", false, errors.New("missing ]")
		}
		host = s[1:end]
		rest := s[end+1:]
		switch {
		case rest == "":
			return host, "", false, nil
		case rest[0] == ':':
			return host, rest[1:], true, nil
		default:
			return "", "", false, errors.New("junk after ]")
		}
	}
	if strings.Count(s, ":") > 1 {
		// A bare IPv6 literal: no port possible without brackets.
		return s, "", false, nil
	}
	if h, p, ok := strings.Cut(s, ":"); ok {
		return h, p, true, nil
	}
	return s, "", false, nil
}

func parsePort(s string) (int, error) {
	if s == "" || len(s) > 5 {
		return 0, fmt.Errorf("bad port %q", s)
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("bad port %q", s)
		}
	}
	p, _ := strconv.Atoi(s)
	if p < 1 || p > 65535 {
		return 0, fmt.Errorf("port %d out of range", p)
	}
	return p, nil
}

// parseIPLiteral reports whether host is a canonical IP literal. IPv6
// zones are refused (they name an interface of the proxy's host), and so
// are the legacy numeric forms inet_aton accepts — 2130706433, 0x7f.1,
// 0177.0.0.1, 127.1 — which resolvers disagree about: a host whose last
// label is numeric is never a DNS name, so it is an error here rather
// than something to look up.
func parseIPLiteral(host string) (netip.Addr, bool, error) {
	if strings.Contains(host, ":") {
		ip, err := netip.ParseAddr(host)
		if err != nil {
			return netip.Addr{}, false, fmt.Errorf("bad IPv6 literal %q", host)
		}
		if ip.Zone() != "" {
			return netip.Addr{}, false, fmt.Errorf("IPv6 zone in %q", host)
		}
		return ip, true, nil
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return ip, true, nil
	}
	h := strings.TrimSuffix(host, ".")
	last := h[strings.LastIndexByte(h, '.')+1:]
	if looksNumeric(last) {
		return netip.Addr{}, false, fmt.Errorf("ambiguous numeric host %q: write the address as a canonical dotted quad", host)
	}
	return netip.Addr{}, false, nil
}

// looksNumeric reports whether a label is a decimal, octal or hex number
// as inet_aton reads them.
func looksNumeric(label string) bool {
	if label == "" {
		return false
	}
	l := strings.ToLower(label)
	if strings.HasPrefix(l, "0x") {
		l = l[2:]
		if l == "" {
			return true
		}
		for _, c := range l {
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				return false
			}
		}
		return true
	}
	for _, c := range l {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// canonicalName validates a DNS host name and returns it lower-cased,
// without a trailing dot.
func canonicalName(host string) (string, error) {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	if h == "" {
		return "", errors.New("empty host")
	}
	if len(h) > 253 {
		return "", errors.New("host name too long")
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 {
			return "", fmt.Errorf("bad host name %q", host)
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			switch {
			case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
			case c == '-' && i > 0 && i < len(label)-1:
			case c == '_': // seen in real names (SRV-style); harmless
			default:
				return "", fmt.Errorf("bad host name %q", host)
			}
		}
	}
	if looksNumeric(h[strings.LastIndexByte(h, '.')+1:]) {
		return "", fmt.Errorf("ambiguous numeric host %q", host)
	}
	return h, nil
}

// Address classes refused unless explicitly allowed. Each has a name that
// appears in denials and the audit log.
var (
	nat64Prefix = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour   = netip.MustParsePrefix("2002::/16")
	special     = []struct {
		prefix netip.Prefix
		class  string
	}{
		{netip.MustParsePrefix("0.0.0.0/8"), "unspecified"},
		{netip.MustParsePrefix("100.64.0.0/10"), "shared (CGNAT)"},
		{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignments"},
		{netip.MustParsePrefix("192.0.2.0/24"), "documentation"},
		{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking"},
		{netip.MustParsePrefix("198.51.100.0/24"), "documentation"},
		{netip.MustParsePrefix("203.0.113.0/24"), "documentation"},
		{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
		{netip.MustParsePrefix("100::/64"), "discard"},
		{netip.MustParsePrefix("2001::/23"), "IETF protocol assignments"},
		{netip.MustParsePrefix("2001:db8::/32"), "documentation"},
	}
)

// addressClass returns "" for a public unicast address and otherwise the
// name of the class that makes it refused: loopback, private, link-local
// (which holds the cloud metadata address 169.254.169.254), and the other
// special-purpose ranges. IPv4-mapped, NAT64 and 6to4 IPv6 addresses are
// judged by the IPv4 address they carry.
func addressClass(ip netip.Addr) string {
	if !ip.IsValid() {
		return "invalid"
	}
	ip = ip.WithZone("")
	if ip.Is4In6() {
		ip = ip.Unmap()
	}
	if ip.Is6() {
		b := ip.As16()
		if nat64Prefix.Contains(ip) {
			if c := addressClass(netip.AddrFrom4([4]byte(b[12:16]))); c != "" {
				return c + " (via NAT64)"
			}
		}
		if sixToFour.Contains(ip) {
			if c := addressClass(netip.AddrFrom4([4]byte(b[2:6]))); c != "" {
				return c + " (via 6to4)"
			}
		}
	}
	switch {
	case ip == metadataV4 || ip == metadataV6:
		return "metadata"
	case ip.IsUnspecified():
		return "unspecified"
	case ip.IsLoopback():
		return "loopback"
	case ip.IsLinkLocalUnicast():
		return "link-local"
	case ip.IsPrivate():
		return "private"
	case ip.IsMulticast(), ip.IsInterfaceLocalMulticast(), ip.IsLinkLocalMulticast():
		return "multicast"
	case ip == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return "broadcast"
	}
	for _, s := range special {
		if s.prefix.Contains(ip) {
			return s.class
		}
	}
	if !ip.IsGlobalUnicast() {
		return "not global unicast"
	}
	return ""
}

var (
	metadataV4 = netip.MustParseAddr("169.254.169.254")
	metadataV6 = netip.MustParseAddr("fd00:ec2::254")
)
