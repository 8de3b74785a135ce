// Package units owns the size and duration notations that fluffy accepts in
// configuration, policy rules and flags: IEC sizes (KiB, MiB, GiB, TiB), SI
// sizes (kB, MB, GB, TB), plain byte counts, and durations that add days (d)
// to Go's ms/s/m/h.
//
// Parsing is strict on purpose: an ambiguous or unknown unit is an error that
// lists the accepted forms, never a guess, because a limit read wrongly is a
// limit not enforced.
package units

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// ErrSyntax is wrapped by every parse error, so callers can branch on it.
var ErrSyntax = errors.New("invalid unit syntax")

// SizeForms lists the accepted size notations, for error messages and docs.
const SizeForms = "a whole number of bytes (4096), or a number with one of B, KiB, MiB, GiB, TiB (powers of 1024) or kB, MB, GB, TB (powers of 1000), e.g. 512MiB, 1.5GB"

// DurationForms lists the accepted duration notations.
const DurationForms = "a number with one of ns, us, ms, s, m, h, d, combinable as in Go (1h30m), e.g. 500ms, 30s, 7d"

var sizeUnits = map[string]float64{
	"b":   1,
	"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
	"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
}

// ambiguous holds the spellings people type that could mean either family;
// they are refused with a hint instead of silently picking one.
var ambiguous = map[string]string{
	"k": "KiB or kB", "m": "MiB or MB", "g": "GiB or GB", "t": "TiB or TB",
	"ki": "KiB", "mi": "MiB", "gi": "GiB", "ti": "TiB",
}

// Size is a byte count. Its text form is parsed with ParseSize and printed
// with String in the largest exact IEC unit.
type Size int64

// ParseSize parses a size such as "10MiB", "1.5GB" or "4096".
func ParseSize(s string) (Size, error) {
	in := strings.TrimSpace(s)
	if in == "" {
		return 0, fmt.Errorf("%w: empty size; use %s", ErrSyntax, SizeForms)
	}
	i := 0
	for i < len(in) && (in[i] >= '0' && in[i] <= '9' || in[i] == '.') {
		i++
	}
	num, unit := in[:i], strings.TrimSpace(in[i:])
	if num == "" {
		return 0, fmt.Errorf("%w: size %q has no number; use %s", ErrSyntax, s, SizeForms)
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: size %q: bad number; use %s", ErrSyntax, s, SizeForms)
	}
	mult := 1.0
	if unit != "" {
		lu := strings.ToLower(unit)
		if hint, ok := ambiguous[lu]; ok {
			return 0, fmt.Errorf("%w: size %q: unit %q is ambiguous, write %s", ErrSyntax, s, unit, hint)
		}
		m, ok := sizeUnits[lu]
		if !ok {
			return 0, fmt.Errorf("%w: size %q: unknown unit %q; use %s", ErrSyntax, s, unit, SizeForms)
		}
		// "mb" vs "Mb": a lower-case b means bits in networking. Refuse it
		// rather than be off by eight.
		if strings.HasSuffix(unit, "b") && lu != "b" && unit != "kb" {
			return 0, fmt.Errorf("%w: size %q: %q reads as bits; write %s", ErrSyntax, s, unit, strings.ToUpper(unit[:len(unit)-1])+"B")
		}
		mult = m
	} else if strings.Contains(num, ".") {
		return 0, fmt.Errorf("%w: size %q: a byte count must be whole; use %s", ErrSyntax, s, SizeForms)
	}
	v := f * mult
	if v > math.MaxInt64 || v < 0 {
		return 0, fmt.Errorf("%w: size %q is out of range", ErrSyntax, s)
	}
	return Size(v), nil
}

// iecUnits are the units String and Approx write, largest first.
var iecUnits = [...]struct {
	name string
	div  int64
}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}}

// String renders the size in the largest IEC unit that represents it exactly.
func (s Size) String() string {
	n := int64(s)
	for _, u := range iecUnits {
		if n != 0 && n%u.div == 0 {
			return strconv.FormatInt(n/u.div, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10) + "B"
}

// Approx renders the size for a person: in the largest IEC unit it
// reaches, with one decimal unless it is a whole number of that unit
// ("49.3MiB", "8MiB", "512B").
func (s Size) Approx() string {
	n := int64(s)
	for _, u := range iecUnits {
		if n >= u.div || -n >= u.div {
			return trimZero(strconv.FormatFloat(float64(n)/float64(u.div), 'f', 1, 64)) + u.name
		}
	}
	return strconv.FormatInt(n, 10) + "B"
}

// trimZero drops a ".0" ending.
func trimZero(s string) string {
	if len(s) > 2 && s[len(s)-2:] == ".0" {
		return s[:len(s)-2]
	}
	return s
}

// UnmarshalText lets Size be decoded from YAML, JSON and flags.
func (s *Size) UnmarshalText(b []byte) error {
	v, err := ParseSize(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// MarshalText renders the size in its canonical text form.
func (s Size) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Duration is a time.Duration whose text form also accepts days.
type Duration time.Duration

// ParseDuration parses "500ms", "30s", "7d" or "1d12h". A bare number is
// refused: "30" could be seconds or minutes.
func ParseDuration(s string) (Duration, error) {
	in := strings.TrimSpace(s)
	if in == "" {
		return 0, fmt.Errorf("%w: empty duration; use %s", ErrSyntax, DurationForms)
	}
	if _, err := strconv.ParseFloat(in, 64); err == nil && in != "0" {
		return 0, fmt.Errorf("%w: duration %q has no unit; use %s", ErrSyntax, s, DurationForms)
	}
	// Expand each "<n>d" into hours, then let time.ParseDuration do the rest.
	var b strings.Builder
	start := 0
	for i := 0; i < len(in); i++ {
		if in[i] != 'd' {
			continue
		}
		j := i
		for j > start && (in[j-1] >= '0' && in[j-1] <= '9' || in[j-1] == '.') {
			j--
		}
		if j == i {
			return 0, fmt.Errorf("%w: duration %q: 'd' without a number; use %s", ErrSyntax, s, DurationForms)
		}
		days, err := strconv.ParseFloat(in[j:i], 64)
		if err != nil {
			return 0, fmt.Errorf("%w: duration %q; use %s", ErrSyntax, s, DurationForms)
		}
		b.WriteString(in[start:j])
		b.WriteString(strconv.FormatFloat(days*24, 'f', -1, 64))
		b.WriteString("h")
		start = i + 1
	}
	b.WriteString(in[start:])
	d, err := time.ParseDuration(b.String())
	if err != nil {
		return 0, fmt.Errorf("%w: duration %q; use %s", ErrSyntax, s, DurationForms)
	}
	if d < 0 {
		return 0, fmt.Errorf("%w: duration %q is negative", ErrSyntax, s)
	}
	return Duration(d), nil
}

// Std returns the value as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// String renders whole days as "Nd", otherwise Go's form.
func (d Duration) String() string {
	td := time.Duration(d)
	if td != 0 && td%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(td/(24*time.Hour)), 10) + "d"
	}
	return td.String()
}

// UnmarshalText lets Duration be decoded from YAML, JSON and flags.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := ParseDuration(string(b))
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// MarshalText renders the duration in its canonical text form.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }
