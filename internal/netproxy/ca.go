package netproxy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"
)

// caValidity bounds the certificate authority a proxy makes and every
// certificate it issues: a proxy serves one sandboxed run.
const caValidity = 24 * time.Hour

// authority is a proxy's own certificate authority, made in memory when
// some swap opts in to TLS. Its key never leaves the process; its
// certificate is name-constrained to the hosts of those swaps, so even a
// sandbox that trusts it trusts it for nothing else.
type authority struct {
	cert    *x509.Certificate
	certPEM []byte
	key     *ecdsa.PrivateKey
	leafKey *ecdsa.PrivateKey // one key for every leaf of this proxy

	mu     sync.Mutex // guards leaves
	leaves map[string]*tls.Certificate
}

func newAuthority(rules []Rule) (*authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("netproxy: CA key: %w", err)
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("netproxy: leaf key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{Organization: []string{"fluffy"}, CommonName: "fluffy egress proxy (one sandbox)"},
		NotBefore:             now.Add(-5 * time.Minute),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	constrain(tmpl, rules)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("netproxy: CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("netproxy: CA certificate: %w", err)
	}
	return &authority{cert: cert, key: key, leafKey: leafKey, leaves: map[string]*tls.Certificate{},
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// constrain limits the names the CA may vouch for to the rules' hosts
// (critical name constraints): names and their subdomains as the rules
// name them, exact addresses, and no address when no rule names one.
func constrain(tmpl *x509.Certificate, rules []Rule) {
	tmpl.PermittedDNSDomainsCritical = true
	for _, r := range rules {
		switch {
		case r.IP.IsValid():
			bits := r.IP.BitLen()
			tmpl.PermittedIPRanges = append(tmpl.PermittedIPRanges, &net.IPNet{IP: r.IP.AsSlice(), Mask: net.CIDRMask(bits, bits)})
		case r.Wildcard:
			tmpl.PermittedDNSDomains = append(tmpl.PermittedDNSDomains, "."+r.Host)
		default:
			tmpl.PermittedDNSDomains = append(tmpl.PermittedDNSDomains, r.Host)
		}
	}
	if len(tmpl.PermittedDNSDomains) == 0 {
		// An empty list would permit every name: permit a reserved one.
		tmpl.PermittedDNSDomains = []string{"invalid"}
	}
	if len(tmpl.PermittedIPRanges) == 0 {
		tmpl.ExcludedIPRanges = []*net.IPNet{
			{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)},
			{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)},
		}
	}
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127)) // crypto/rand never fails on Linux
	return n
}

// leaf returns the certificate the proxy shows the sandbox for host (a
// canonical name or an IP literal), issuing it on first use.
func (a *authority) leaf(host string) (*tls.Certificate, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if c, ok := a.leaves[host]; ok {
		return c, nil
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		// No common name: OpenSSL checks one against the DNS name
		// constraints, and an address in it would break them.
		NotBefore:   now.Add(-5 * time.Minute),
		NotAfter:    a.cert.NotAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		tmpl.IPAddresses = []net.IP{ip.AsSlice()}
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, &a.leafKey.PublicKey, a.key)
	if err != nil {
		return nil, fmt.Errorf("netproxy: certificate for %s: %w", host, err)
	}
	c := &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: a.leafKey}
	a.leaves[host] = c
	return c, nil
}

// CAEnv returns the variables that make common TLS clients in a sandbox
// trust the bundle at path (the system's roots and the proxy's CA): Go
// and OpenSSL (SSL_CERT_FILE), curl (CURL_CA_BUNDLE), Python requests
// (REQUESTS_CA_BUNDLE) and Node (NODE_EXTRA_CA_CERTS, which adds to its
// own roots).
func CAEnv(path string) []string {
	return []string{
		"SSL_CERT_FILE=" + path, "CURL_CA_BUNDLE=" + path,
		"REQUESTS_CA_BUNDLE=" + path, "NODE_EXTRA_CA_CERTS=" + path,
	}
}

// systemBundles are where Linux distributions keep the system's roots.
var systemBundles = []string{
	"/etc/ssl/certs/ca-certificates.crt",                // Debian, Ubuntu, Alpine, Arch
	"/etc/pki/tls/certs/ca-bundle.crt",                  // Fedora, RHEL
	"/etc/ssl/ca-bundle.pem",                            // openSUSE
	"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", // RHEL 7+
}

// ErrNoSystemRoots: no system root bundle was found.
var ErrNoSystemRoots = errors.New("netproxy: no system certificate bundle found")

// TrustBundle returns the system's root bundle followed by ca: the file a
// sandbox is pointed at (CAEnv) so that it trusts the proxy's CA besides,
// not instead of, the roots it trusts anyway.
func TrustBundle(ca []byte) ([]byte, error) {
	for _, p := range systemBundles {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if len(b) > 0 && b[len(b)-1] != '\n' {
			b = append(b, '\n')
		}
		return append(b, ca...), nil
	}
	return nil, ErrNoSystemRoots
}
