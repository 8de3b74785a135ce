//go:build goolm

package wiring

import (
	"path/filepath"

	"github.com/fluffy-agent/fluffy/internal/channel"
	"github.com/fluffy-agent/fluffy/internal/channel/matrix"
	"github.com/fluffy-agent/fluffy/internal/config"
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
		ch, err := matrix.New(m, matrix.Options{Logger: d.log.With("channel", name), StateDir: dir, LookupEnv: d.env, Now: d.now})
		if err != nil {
			return out, err
		}
		out = append(out, ch)
	}
	return out, nil
}
