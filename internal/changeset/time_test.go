package changeset

import "time"

func mustTime() time.Time { return time.Unix(1_000_000_000, 0) }
