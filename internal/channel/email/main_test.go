package email

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind: Run
// must take down its listener, its connections and the messages in
// flight.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
