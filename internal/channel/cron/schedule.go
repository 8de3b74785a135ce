package cron

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	// Zones are compiled in, so a job's timezone means the same on a
	// host without a zone database (and `fluffy serve --check` agrees
	// with the daemon).
	_ "time/tzdata"
)

// Schedule says when a job is due: Next returns the first slot strictly
// after a time, or the zero time when there is none.
type Schedule interface {
	Next(after time.Time) time.Time
}

// ErrNeverFires: the expression is valid field by field but names no
// date that exists (30 February), so the job would never run.
var ErrNeverFires = errors.New("the schedule names no date that exists")

// searchDays bounds Next's search: every valid expression fires within
// eight years (29 February on a given weekday repeats within 28 years,
// but a day-of-month and day-of-week together match either one, so the
// rarest expression that exists is 29 February, every four years, or
// eight across a skipped leap year such as 2100).
const searchDays = 8*366 + 1

// Expr is a parsed five-field cron expression (minute hour day-of-month
// month day-of-week), read in a time zone.
//
// Daylight-saving changes: a wall time that does not exist (the hour the
// clocks skip) fires at the instant the clocks jump, once however many
// slots fell in the gap; a wall time that occurs twice (the hour repeated
// when the clocks go back) fires at its first occurrence only. A job
// meant to run every few minutes around the clock should use an interval
// (`every`), which counts real time.
type Expr struct {
	minute, hour, dom, month, dow uint64 // bit i set: value i matches
	// domStar, dowStar: the field was "*" (or "*/n"); when both day
	// fields are restricted, a day matching either one matches (cron's
	// traditional rule).
	domStar, dowStar bool
	loc              *time.Location
	src              string
}

// FieldError is a cron expression's problem in one field.
type FieldError struct {
	Field string // "minute", "hour", "day-of-month", "month", "day-of-week"
	Value string
	Msg   string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("%s field %q: %s", e.Field, e.Value, e.Msg)
}

type field struct {
	name     string
	min, max int
	names    []string // names[i] is the value min+i
}

var fields = [5]field{
	{name: "minute", min: 0, max: 59},
	{name: "hour", min: 0, max: 23},
	{name: "day-of-month", min: 1, max: 31},
	{name: "month", min: 1, max: 12, names: []string{"jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"}},
	// 7 is Sunday too, folded into 0 after parsing.
	{name: "day-of-week", min: 0, max: 7, names: []string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}},
}

var macros = map[string]string{
	"@yearly":   "0 0 1 1 *",
	"@annually": "0 0 1 1 *",
	"@monthly":  "0 0 1 * *",
	"@weekly":   "0 0 * * 0",
	"@daily":    "0 0 * * *",
	"@midnight": "0 0 * * *",
	"@hourly":   "0 * * * *",
}

// Parse reads a five-field cron expression (or one of @yearly, @monthly,
// @weekly, @daily, @hourly) in loc. Fields take *, numbers, ranges a-b,
// steps */n and a-b/n, comma lists, and English three-letter month and
// weekday names. An expression that can never fire is ErrNeverFires.
func Parse(expr string, loc *time.Location) (*Expr, error) {
	if loc == nil {
		return nil, errors.New("cron: no time zone")
	}
	src := strings.TrimSpace(expr)
	if m, ok := macros[strings.ToLower(src)]; ok {
		src = m
	} else if strings.HasPrefix(src, "@") {
		return nil, fmt.Errorf("unknown macro %q (known: @yearly, @monthly, @weekly, @daily, @hourly)", src)
	}
	parts := strings.Fields(src)
	if len(parts) != 5 {
		return nil, fmt.Errorf("%q has %d fields, a cron expression has 5 (minute hour day-of-month month day-of-week)", expr, len(parts))
	}
	e := &Expr{loc: loc, src: strings.Join(parts, " ")}
	sets := [5]*uint64{&e.minute, &e.hour, &e.dom, &e.month, &e.dow}
	for i, p := range parts {
		bits, star, err := parseField(p, fields[i])
		if err != nil {
			return nil, err
		}
		*sets[i] = bits
		switch i {
		case 2:
			e.domStar = star
		case 4:
			e.dowStar = star
		}
	}
	if e.dow&(1<<7) != 0 {
		e.dow = e.dow&^(1<<7) | 1
	}
	if e.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, loc)).IsZero() {
		return nil, fmt.Errorf("%q: %w", expr, ErrNeverFires)
	}
	return e, nil
}

// String is the expression as parsed (macros expanded).
func (e *Expr) String() string { return e.src }

func parseField(s string, f field) (bits uint64, star bool, err error) {
	for _, item := range strings.Split(s, ",") {
		b, st, err := parseItem(item, f)
		if err != nil {
			return 0, false, &FieldError{Field: f.name, Value: s, Msg: err.Error()}
		}
		bits |= b
		star = star || st
	}
	return bits, star, nil
}

func parseItem(item string, f field) (uint64, bool, error) {
	rng, stepStr, hasStep := strings.Cut(item, "/")
	step := 1
	if hasStep {
		n, err := strconv.Atoi(stepStr)
		if err != nil || n < 1 || n > f.max-f.min+1 {
			return 0, false, fmt.Errorf("step %q is not a number from 1 to %d", stepStr, f.max-f.min+1)
		}
		step = n
	}
	lo, hi, star := f.min, f.max, false
	switch {
	case rng == "*":
		star = true
		if f.name == "day-of-week" {
			hi = 6 // 7 is 0 again
		}
	case rng == "":
		return 0, false, errors.New("empty item")
	default:
		a, b, isRange := strings.Cut(rng, "-")
		var err error
		if lo, err = f.value(a); err != nil {
			return 0, false, err
		}
		hi = lo
		if isRange {
			if hi, err = f.value(b); err != nil {
				return 0, false, err
			}
			if hi < lo {
				return 0, false, fmt.Errorf("range %q runs backwards", rng)
			}
		} else if hasStep {
			hi = f.max // "5/15" means 5-max/15
		}
	}
	var bits uint64
	for v := lo; v <= hi; v += step {
		bits |= 1 << uint(v)
	}
	return bits, star && step == 1, nil
}

func (f field) value(s string) (int, error) {
	for i, n := range f.names {
		if strings.EqualFold(s, n) {
			return f.min + i, nil
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < f.min || n > f.max || s != strconv.Itoa(n) {
		if len(f.names) > 0 {
			return 0, fmt.Errorf("%q is not a number from %d to %d or a name (%s)", s, f.min, f.max, strings.Join(f.names, ", "))
		}
		return 0, fmt.Errorf("%q is not a number from %d to %d", s, f.min, f.max)
	}
	return n, nil
}

func (e *Expr) dayMatches(t time.Time) bool {
	if e.month&(1<<uint(t.Month())) == 0 {
		return false
	}
	dom := e.dom&(1<<uint(t.Day())) != 0
	dow := e.dow&(1<<uint(t.Weekday())) != 0
	if !e.domStar && !e.dowStar {
		return dom || dow
	}
	return dom && dow
}

// Next returns the first slot strictly after after, or the zero time if
// none exists within the search bound (never for a parsed expression).
func (e *Expr) Next(after time.Time) time.Time {
	a := after.In(e.loc)
	day := time.Date(a.Year(), a.Month(), a.Day(), 12, 0, 0, 0, time.UTC) // calendar arithmetic only
	// On after's own date, wall times before its wall time name instants
	// at or before it (a skipped one names the jump, which after is not
	// before; a repeated one its first occurrence), so they are passed
	// over without converting each.
	firstH, firstM := a.Hour(), a.Minute()
	for range searchDays {
		if e.dayMatches(day) {
			for h := firstH; h < 24; h++ {
				if e.hour&(1<<uint(h)) == 0 {
					continue
				}
				m0 := 0
				if h == firstH {
					m0 = firstM
				}
				for m := m0; m < 60; m++ {
					if e.minute&(1<<uint(m)) == 0 {
						continue
					}
					if t := wallInstant(day.Year(), day.Month(), day.Day(), h, m, e.loc); t.After(after) {
						return t
					}
				}
			}
		}
		day = day.AddDate(0, 0, 1)
		firstH, firstM = 0, 0
	}
	return time.Time{}
}

// wallInstant is the instant a wall-clock time names in loc: for a time
// the clocks skip, the instant they jump; for a time that occurs twice,
// its first occurrence.
func wallInstant(y int, mo time.Month, d, h, mi int, loc *time.Location) time.Time {
	t := time.Date(y, mo, d, h, mi, 0, 0, loc)
	if t.Hour() != h || t.Minute() != mi || t.Day() != d {
		// Not a wall time in loc: Go placed it on one side of the jump.
		want := time.Date(y, mo, d, h, mi, 0, 0, time.UTC)
		got := time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), 0, 0, time.UTC)
		start, end := t.ZoneBounds()
		if got.After(want) {
			return start
		}
		return end
	}
	start, _ := t.ZoneBounds()
	if start.IsZero() {
		return t
	}
	_, cur := t.Zone()
	_, prev := start.Add(-time.Second).Zone()
	if prev > cur {
		// The clocks went back at start: the same wall time may have
		// occurred before it, in the previous offset.
		if u := t.Add(-time.Duration(prev-cur) * time.Second); u.Before(start) {
			if w := u.In(loc); w.Hour() == h && w.Minute() == mi && w.Day() == d {
				return u
			}
		}
	}
	return t
}

// Interval is a schedule of fixed real-time steps from an anchor: slots
// are anchor + k·Every.
type Interval struct {
	Every  time.Duration
	Anchor time.Time
}

// Next returns the first slot strictly after after.
func (iv Interval) Next(after time.Time) time.Time {
	if iv.Every <= 0 {
		return time.Time{}
	}
	if after.Before(iv.Anchor) {
		return iv.Anchor
	}
	k := after.Sub(iv.Anchor)/iv.Every + 1
	return iv.Anchor.Add(k * iv.Every)
}
