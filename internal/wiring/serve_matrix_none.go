//go:build !goolm

package wiring

import (
	"errors"

	"github.com/fluffy-agent/fluffy/internal/channel"
	"github.com/fluffy-agent/fluffy/internal/config"
	"github.com/fluffy-agent/fluffy/internal/ipc"
)

// matrixChannels refuses serve.matrix in a build without the goolm tag:
// mautrix's olm is linked only with it (the Makefile always sets it).
func matrixChannels(accounts []config.Matrix, _ channelDeps) ([]channel.Channel, error) {
	if len(accounts) == 0 {
		return nil, nil
	}
	return nil, errors.New("serve.matrix: this fluffy was built without the Matrix channel (build with -tags goolm, as make build does)")
}

// registerMatrix: a build without the Matrix channel serves nothing.
func registerMatrix(*ipc.Mux, []channel.Channel) error { return nil }
