package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fluffy-agent/fluffy/internal/tui/termsafe"
)

// probeBodyMax bounds what a probe reads of an answer: /readyz says one
// line per thing that is not ready.
const probeBodyMax = 64 << 10

// errNotHealthy is a probe's answer other than 200.
var errNotHealthy = errors.New("not healthy")

func newServeProbeCmd(a *App) *cobra.Command {
	var ready bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "probe [ADDRESS]",
		Short: "GET /healthz (or /readyz) from the daemon's health listener: exit 0 on 200",
		Long: `probe asks a running 'fluffy serve' over HTTP whether it serves: it GETs
/healthz (with --ready, /readyz) on ADDRESS, by default serve.health, and
prints the answer. It exits 0 when the answer is 200 and 1 otherwise (no
answer within --timeout, or another status), so it can be a container's
HEALTHCHECK without curl in the image. ADDRESS is host:port or
unix:/path, as serve.health takes it; an address on every interface
(0.0.0.0, [::]) is asked on loopback.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			addr := ""
			if len(args) == 1 {
				addr = args[0]
			} else {
				l, err := a.Config()
				if err != nil {
					return err
				}
				addr = l.Config.Serve.Health
			}
			if addr == "" {
				return fmt.Errorf("%w: serve.health is not set: no health listener to probe", errUsage)
			}
			path := "/healthz"
			if ready {
				path = "/readyz"
			}
			status, body, err := probeHealth(cmd.Context(), addr, path, timeout)
			fmt.Fprint(a.Stdout, termsafe.String(body))
			if err != nil {
				return &ExitError{Code: ExitFailure, Msg: termsafe.String(err.Error())}
			}
			if status != http.StatusOK {
				return &ExitError{Code: ExitFailure, Msg: fmt.Sprintf("%s on %s: %d %s", path, termsafe.String(addr), status, http.StatusText(status))}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&ready, "ready", false, "GET /readyz (the store answers, every channel connected) instead of /healthz")
	cmd.Flags().DurationVar(&timeout, "timeout", 3*time.Second, "give up after this long")
	return cmd
}

// probeHealth GETs path from the health listener at addr (host:port or
// unix:/path) within timeout and returns the status and the body (up to
// probeBodyMax). An error is no answer at all.
func probeHealth(ctx context.Context, addr, path string, timeout time.Duration) (int, string, error) {
	network, dial, err := probeTarget(addr)
	if err != nil {
		return 0, "", err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c := &http.Client{Transport: &http.Transport{
		DisableKeepAlives: true,
		Proxy:             nil, // a loopback listener: never through HTTP_PROXY
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, dial)
		}}}
	// The dial above decides where the request goes; the URL's host is
	// the Host header and what an error names.
	host := dial
	if network == "unix" {
		host = "localhost"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+host+path, nil)
	if err != nil {
		return 0, "", fmt.Errorf("probe %s: %w", addr, err)
	}
	res, err := c.Do(req)
	if err != nil {
		return 0, "", fmt.Errorf("%s on %s: %w: %w", path, addr, errNotHealthy, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, probeBodyMax))
	if err != nil {
		return res.StatusCode, string(b), fmt.Errorf("%s on %s: reading the answer: %w", path, addr, err)
	}
	return res.StatusCode, string(b), nil
}

// probeTarget is where a probe of addr dials: a unix socket as is, a
// host:port on every interface on loopback.
func probeTarget(addr string) (network, dial string, err error) {
	if p, ok := strings.CutPrefix(addr, "unix:"); ok {
		return "unix", p, nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", "", fmt.Errorf("%w: %q: want host:port or unix:/path: %w", errUsage, addr, err)
	}
	switch ip := net.ParseIP(host); {
	case host == "":
		host = "127.0.0.1"
	case ip != nil && ip.IsUnspecified() && ip.To4() != nil:
		host = "127.0.0.1"
	case ip != nil && ip.IsUnspecified():
		host = "::1"
	}
	return "tcp", net.JoinHostPort(host, port), nil
}
