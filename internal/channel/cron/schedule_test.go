package cron

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func zone(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// slots returns the first n slots of s after from, as UTC RFC 3339.
func slots(s Schedule, from time.Time, n int) []string {
	var out []string
	for t := from; len(out) < n; {
		t = s.Next(t)
		if t.IsZero() {
			break
		}
		out = append(out, t.UTC().Format(time.RFC3339))
	}
	return out
}

func mustParse(t *testing.T, expr string, loc *time.Location) *Expr {
	t.Helper()
	e, err := Parse(expr, loc)
	if err != nil {
		t.Fatalf("Parse(%q): %v", expr, err)
	}
	return e
}

func TestNext(t *testing.T) {
	from := time.Date(2026, 1, 30, 23, 59, 0, 0, time.UTC) // a Friday
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{"* * * * *", []string{"2026-01-31T00:00:00Z", "2026-01-31T00:01:00Z"}},
		{"30 9 * * 1-5", []string{"2026-02-02T09:30:00Z", "2026-02-03T09:30:00Z"}},
		{"0 */6 * * *", []string{"2026-01-31T00:00:00Z", "2026-01-31T06:00:00Z", "2026-01-31T12:00:00Z"}},
		{"15,45 8 * * sat", []string{"2026-01-31T08:15:00Z", "2026-01-31T08:45:00Z", "2026-02-07T08:15:00Z"}},
		{"0 0 1 feb,MAR *", []string{"2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z", "2027-02-01T00:00:00Z"}},
		// Both day fields restricted: either matches (the 13th, or a Friday).
		{"0 12 13 * 5", []string{"2026-02-06T12:00:00Z", "2026-02-13T12:00:00Z", "2026-02-20T12:00:00Z"}},
		// One day field restricted: it alone decides.
		{"0 12 13 * *", []string{"2026-02-13T12:00:00Z", "2026-03-13T12:00:00Z"}},
		{"0 0 * * 7", []string{"2026-02-01T00:00:00Z", "2026-02-08T00:00:00Z"}}, // 7 is Sunday
		{"0 0 29 2 *", []string{"2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z"}},
		{"5/20 0 * * *", []string{"2026-01-31T00:05:00Z", "2026-01-31T00:25:00Z", "2026-01-31T00:45:00Z"}},
		{"@daily", []string{"2026-01-31T00:00:00Z", "2026-02-01T00:00:00Z"}},
	} {
		got := slots(mustParse(t, tc.expr, time.UTC), from, len(tc.want))
		if strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("%q after %s:\n got %v\nwant %v", tc.expr, from.Format(time.RFC3339), got, tc.want)
		}
	}
}

// The rules for daylight-saving changes (Expr's doc): a skipped wall time
// fires when the clocks jump, once; a repeated one at its first
// occurrence only.
func TestNextAcrossDaylightSaving(t *testing.T) {
	ny := zone(t, "America/New_York")          // 2026-03-08 02:00 EST → 03:00 EDT; 2026-11-01 02:00 EDT → 01:00 EST
	berlin := zone(t, "Europe/Berlin")         // 2026-03-29 02:00 → 03:00; 2026-10-25 03:00 → 02:00
	lordHowe := zone(t, "Australia/Lord_Howe") // half-hour shifts: 2026-04-05 02:00 → 01:30; 2026-10-04 02:00 → 02:30
	for _, tc := range []struct {
		name string
		expr string
		loc  *time.Location
		from time.Time
		want []string
	}{
		{"spring: 02:30 does not exist, fires at the jump", "30 2 * * *", ny, time.Date(2026, 3, 7, 0, 0, 0, 0, ny),
			[]string{"2026-03-07T07:30:00Z", "2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"}},
		{"spring: four skipped slots fire once", "*/15 2 * * *", ny, time.Date(2026, 3, 8, 0, 0, 0, 0, ny),
			[]string{"2026-03-08T07:00:00Z", "2026-03-09T06:00:00Z"}},
		{"spring: an hourly job", "0 * * * *", ny, time.Date(2026, 3, 8, 0, 30, 0, 0, ny),
			[]string{"2026-03-08T06:00:00Z", "2026-03-08T07:00:00Z", "2026-03-08T08:00:00Z"}},
		{"autumn: 01:30 occurs twice, fires at the first", "30 1 * * *", ny, time.Date(2026, 10, 31, 0, 0, 0, 0, ny),
			[]string{"2026-10-31T05:30:00Z", "2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"}},
		{"autumn: an hourly job skips the repeated pass", "0 * * * *", ny, time.Date(2026, 11, 1, 0, 30, 0, 0, ny),
			[]string{"2026-11-01T05:00:00Z", "2026-11-01T07:00:00Z", "2026-11-01T08:00:00Z"}},
		{"autumn: started inside the repeated hour's second pass", "30 1 * * *", ny, time.Date(2026, 11, 1, 6, 10, 0, 0, time.UTC),
			[]string{"2026-11-02T06:30:00Z"}},
		{"berlin spring", "30 2 * * *", berlin, time.Date(2026, 3, 28, 12, 0, 0, 0, berlin),
			[]string{"2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"}},
		{"berlin autumn", "30 2 * * *", berlin, time.Date(2026, 10, 24, 12, 0, 0, 0, berlin),
			[]string{"2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"}},
		{"lord howe: a half-hour jump forward", "15 2 * * *", lordHowe, time.Date(2026, 10, 3, 12, 0, 0, 0, lordHowe),
			[]string{"2026-10-03T15:30:00Z", "2026-10-04T15:15:00Z"}},
		{"lord howe: a half-hour jump back", "45 1 * * *", lordHowe, time.Date(2026, 4, 4, 12, 0, 0, 0, lordHowe),
			[]string{"2026-04-04T14:45:00Z", "2026-04-05T15:15:00Z"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := slots(mustParse(t, tc.expr, tc.loc), tc.from, len(tc.want))
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Errorf("%q after %s:\n got %v\nwant %v", tc.expr, tc.from.Format(time.RFC3339), got, tc.want)
			}
		})
	}
}

func TestInterval(t *testing.T) {
	anchor := time.Date(2026, 3, 8, 1, 10, 0, 0, zone(t, "America/New_York"))
	iv := Interval{Every: 45 * time.Minute, Anchor: anchor}
	// Real time: the DST jump changes nothing.
	want := []string{"2026-03-08T06:55:00Z", "2026-03-08T07:40:00Z", "2026-03-08T08:25:00Z"}
	if got := slots(iv, anchor, 3); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("got %v, want %v", got, want)
	}
	if got := iv.Next(anchor.Add(-time.Hour)); !got.Equal(anchor) {
		t.Errorf("before the anchor: got %v, want the anchor", got)
	}
	if got := iv.Next(anchor.Add(50 * time.Minute)); !got.Equal(anchor.Add(90 * time.Minute)) {
		t.Errorf("mid-interval: got %v", got)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ expr, want string }{
		{"* * * *", "has 4 fields"},
		{"* * * * * *", "has 6 fields"},
		{"60 * * * *", `minute field "60"`},
		{"* 24 * * *", `hour field "24"`},
		{"* * 0 * *", `day-of-month field "0"`},
		{"* * * 13 *", `month field "13"`},
		{"* * * * 8", `day-of-week field "8"`},
		{"5-1 * * * *", "runs backwards"},
		{"*/0 * * * *", "step"},
		{"*/61 * * * *", "step"},
		{"1,,2 * * * *", "empty item"},
		{"* * * foo *", "not a number from 1 to 12 or a name"},
		{"+5 * * * *", "not a number"},
		{"0 0 30 2 *", "names no date that exists"},
		{"@reboot", "unknown macro"},
	} {
		_, err := Parse(tc.expr, time.UTC)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want an error containing %q", tc.expr, err, tc.want)
		}
	}
	if _, err := Parse("0 0 31 2,4 *", time.UTC); !errors.Is(err, ErrNeverFires) {
		t.Errorf("31 February and April: %v, want ErrNeverFires", err)
	}
	var fe *FieldError
	if _, err := Parse("* 99 * * *", time.UTC); !errors.As(err, &fe) || fe.Field != "hour" {
		t.Errorf("got %v, want a FieldError for the hour", err)
	}
}

// FuzzParse: any expression Parse accepts reparses from its String to the
// same schedule, and its next slot is later than the time asked about and
// on a whole minute.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"* * * * *", "30 2 * * 1-5", "*/7 1,3 1-15/2 jan-mar sun", "@weekly", "0 0 29 2 *", "5/20 0 * * 7"} {
		f.Add(s, int64(0))
	}
	ny := zone(f, "America/New_York")
	f.Fuzz(func(t *testing.T, expr string, sec int64) {
		e, err := Parse(expr, ny)
		if err != nil {
			return
		}
		again, err := Parse(e.String(), ny)
		if err != nil {
			t.Fatalf("%q parsed, its String %q does not: %v", expr, e.String(), err)
		}
		from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(sec%(5*365*86400)) * time.Second)
		n := e.Next(from)
		if n.IsZero() || !n.After(from) || n.Second() != 0 || !n.Equal(again.Next(from)) {
			t.Fatalf("%q: Next(%v) = %v (reparsed: %v)", expr, from, n, again.Next(from))
		}
	})
}

// catchUp counts an interval's slots by arithmetic and an expression's
// one by one; both give the latest passed slot and how many passed.
func TestCatchUp(t *testing.T) {
	t0 := time.Date(2026, 6, 1, 10, 0, 0, 0, time.UTC)
	iv := Interval{Every: 10 * time.Minute, Anchor: t0}
	for _, tc := range []struct {
		s          Schedule
		last, now  time.Time
		wantLatest time.Time
		wantN      int
	}{
		{iv, t0, t0.Add(9 * time.Minute), time.Time{}, 0},
		{iv, t0, t0.Add(10 * time.Minute), t0.Add(10 * time.Minute), 1},
		{iv, t0, t0.Add(59 * time.Minute), t0.Add(50 * time.Minute), 5},
		{iv, t0, t0.Add(365 * 24 * time.Hour), t0.Add(365 * 24 * time.Hour), 365 * 24 * 6},
		{mustParse(t, "*/10 * * * *", time.UTC), t0, t0.Add(59 * time.Minute), t0.Add(50 * time.Minute), 5},
		{mustParse(t, "0 9 * * *", time.UTC), t0, t0.Add(72 * time.Hour), time.Date(2026, 6, 4, 9, 0, 0, 0, time.UTC), 3},
	} {
		latest, n := catchUp(tc.s, tc.last, tc.now)
		if !latest.Equal(tc.wantLatest) || n != tc.wantN {
			t.Errorf("catchUp(%v, %v, %v) = %v, %d; want %v, %d", tc.s, tc.last, tc.now, latest, n, tc.wantLatest, tc.wantN)
		}
	}
}
