//go:build goolm

package wiring

import (
	"path/filepath"

	"github.com/fluffy-agent/fluffy/internal/channel"
	"github.com/fluffy-agent/fluffy/internal/channel/matrix"
	"github.com/fluffy-agent/fluffy/internal/config"
	"github.com/fluffy-agent/fluffy/internal/ipc"
)

// matrixChannels builds one channel per serve.matrix account, its state
// under <data dir>/matrix/<name>/.
func matrixChannels(accounts []config.Matrix, d channelDeps) ([]channel.Channel, error) {
	var out []channel.Channel
	for _, m := range accounts {
		name := matrix.ChannelName(m)
		dir := ""
		if d.data != "" {
			dir = filepath.Join(d.data, "matrix", name)
		}
		ch, err := matrix.New(m, matrix.Options{Logger: d.log.With("channel", name), StateDir: dir, LookupEnv: d.env, Resolve: d.resolve, Now: d.now})
		if err != nil {
			return out, err
		}
		out = append(out, ch)
	}
	return out, nil
}

// registerMatrix serves `fluffy matrix verify` for the Matrix channels
// among chans.
func registerMatrix(mux *ipc.Mux, chans []channel.Channel) error {
	var ms []*matrix.Channel
	for _, ch := range chans {
		if m, ok := ch.(*matrix.Channel); ok {
			ms = append(ms, m)
		}
	}
	if len(ms) == 0 {
		return nil
	}
	return matrix.RegisterVerify(mux, ms)
}
