// Command netplugin is a test plugin with one tool, get, which fetches a
// URL through whatever proxy its environment names (the egress proxy in
// fluffy's sandbox), optionally with the header "Authorization: Bearer
// $AUTH" made from the variable AUTH names (a proxy credential's
// placeholder), which it then reports as it holds it; and cafile, which
// reads the bundle of certificates SSL_CERT_FILE names.
package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/fluffy-agent/fluffy/pkg/pluginsdk"
)

type getIn struct {
	URL  string `json:"url"`
	Auth string `json:"auth,omitempty" jsonschema:"a variable whose value is sent as a bearer token"`
}

func main() {
	s := pluginsdk.New("net", "1")
	pluginsdk.Tool(s, "get", "Fetch a URL.", func(ctx context.Context, in getIn) (string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, in.URL, nil)
		if err != nil {
			return "", err
		}
		sent := ""
		if in.Auth != "" {
			sent = "Bearer " + os.Getenv(in.Auth)
			req.Header.Set("Authorization", sent)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return "", err
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(res.Body, 1<<16))
		if sent != "" {
			return fmt.Sprintf("status %d: %s (sent %s)", res.StatusCode, b, sent), nil
		}
		return fmt.Sprintf("status %d: %s", res.StatusCode, b), nil
	})
	pluginsdk.Tool(s, "cafile", "Say which CA bundle the environment names and whether it holds certificates.", func(context.Context, struct{}) (string, error) {
		p := os.Getenv("SSL_CERT_FILE")
		b, err := os.ReadFile(p)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%s: %d certificates", p, strings.Count(string(b), "BEGIN CERTIFICATE")), nil
	})
	pluginsdk.Main(s)
}
