package kernel

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/fluffy-agent/fluffy/internal/llm"
)

// Messages returns session id's conversation as its newest save holds
// it (at each turn boundary and after each tool result): the messages
// only ever grow, so a reader can tell what was stored before a point
// by their count. ErrNotFound for an unknown session. The web console
// shows a session's history with it.
func (k *Kernel) Messages(ctx context.Context, id string) ([]llm.Message, error) {
	st, err := k.loadState(ctx, id)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return nil, err
	}
	return st.Agent.Messages, nil
}
