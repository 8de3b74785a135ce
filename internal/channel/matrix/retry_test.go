//go:build goolm

package matrix

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"maunium.net/go/mautrix"
)

func limitErr(ms float64) error {
	return mautrix.HTTPError{RespError: &mautrix.RespError{ErrCode: "M_LIMIT_EXCEEDED", StatusCode: http.StatusTooManyRequests,
		ExtraData: map[string]any{"retry_after_ms": ms}}}
}

func TestNextWait(t *testing.T) {
	other := errors.New("connection refused")
	var got []time.Duration
	w := time.Duration(0)
	for range 8 {
		w = nextWait(w, other)
		got = append(got, w)
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second, time.Minute, time.Minute}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("backoff %v, want %v", got, want)
		}
	}
	// M_LIMIT_EXCEEDED: the homeserver's retry_after_ms, whatever the
	// backoff had reached.
	if d := nextWait(time.Minute, limitErr(1500)); d != 1500*time.Millisecond {
		t.Fatalf("after M_LIMIT_EXCEEDED with retry_after_ms 1500: %v", d)
	}
}

func TestLimitedWaitsOutRateLimits(t *testing.T) {
	calls := 0
	err := limited(context.Background(), func() error {
		calls++
		if calls < 3 {
			return limitErr(1)
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("limited: %v after %d calls, want nil after 3", err, calls)
	}
	other := errors.New("forbidden")
	calls = 0
	if err := limited(context.Background(), func() error { calls++; return other }); !errors.Is(err, other) || calls != 1 {
		t.Fatalf("another error is not retried: %v after %d calls", err, calls)
	}
}
