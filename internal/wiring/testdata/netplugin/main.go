// Command netplugin is a test plugin with one tool, get, which fetches a
// URL through whatever proxy its environment names (the egress proxy in
// fluffy's sandbox).
package main

import (
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/fluffy-agent/fluffy/pkg/pluginsdk"
)

type getIn struct {
	URL string `json:"url"`
}

func main() {
	s := pluginsdk.New("net", "1")
	pluginsdk.Tool(s, "get", "Fetch a URL.", func(ctx context.Context, in getIn) (string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, in.URL, nil)
		if err != nil {
			return "", err
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return "", err
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(res.Body, 1<<16))
		return fmt.Sprintf("status %d: %s", res.StatusCode, b), nil
	})
	pluginsdk.Main(s)
}
