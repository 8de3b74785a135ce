package units

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseSize(t *testing.T) {
	tests := []struct {
		in      string
		want    Size
		wantErr string
	}{
		{in: "4096", want: 4096},
		{in: "0", want: 0},
		{in: "10MiB", want: 10 << 20},
		{in: "10 MiB", want: 10 << 20},
		{in: "1.5GiB", want: 3 << 29},
		{in: "2kB", want: 2000},
		{in: "2KB", want: 2000},
		{in: "3MB", want: 3e6},
		{in: "1TB", want: 1e12},
		{in: "1TiB", want: 1 << 40},
		{in: "12B", want: 12},
		{in: "", wantErr: "empty size"},
		{in: "MiB", wantErr: "has no number"},
		{in: "10M", wantErr: "ambiguous, write MiB or MB"},
		{in: "10k", wantErr: "ambiguous"},
		{in: "10Mi", wantErr: "write MiB"},
		{in: "10mb", wantErr: "reads as bits"},
		{in: "10Mb", wantErr: "reads as bits"},
		{in: "10 parsecs", wantErr: "unknown unit"},
		{in: "1.5", wantErr: "must be whole"},
		{in: "1.2.3MiB", wantErr: "bad number"},
		{in: "99999999999TiB", wantErr: "out of range"},
		{in: "-1", wantErr: "has no number"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseSize(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseSize(%q) error = %v, want containing %q", tt.in, err, tt.wantErr)
				}
				if !errors.Is(err, ErrSyntax) {
					t.Fatalf("error %v does not wrap ErrSyntax", err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseSize(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestSizeString(t *testing.T) {
	for in, want := range map[Size]string{0: "0B", 1023: "1023B", 1024: "1KiB", 10 << 20: "10MiB", 3 << 30: "3GiB", 1000: "1000B"} {
		if got := in.String(); got != want {
			t.Errorf("Size(%d).String() = %q, want %q", int64(in), got, want)
		}
	}
}

func TestSizeApprox(t *testing.T) {
	for in, want := range map[Size]string{0: "0B", 512: "512B", 1024: "1KiB", 1536: "1.5KiB", 50460 << 10: "49.3MiB",
		8 << 20: "8MiB", (8 << 20) + 1: "8MiB", (3 << 30) - (1 << 20): "3GiB", 5 << 40: "5TiB", -(2 << 20): "-2MiB"} {
		if got := in.Approx(); got != want {
			t.Errorf("Size(%d).Approx() = %q, want %q", int64(in), got, want)
		}
	}
}

func TestParseDuration(t *testing.T) {
	tests := []struct {
		in      string
		want    time.Duration
		wantErr string
	}{
		{in: "500ms", want: 500 * time.Millisecond},
		{in: "30s", want: 30 * time.Second},
		{in: "7d", want: 7 * 24 * time.Hour},
		{in: "1d12h", want: 36 * time.Hour},
		{in: "0.5d", want: 12 * time.Hour},
		{in: "0", want: 0},
		{in: "30", wantErr: "has no unit"},
		{in: "d", wantErr: "without a number"},
		{in: "5 weeks", wantErr: "use a number"},
		{in: "", wantErr: "empty"},
		{in: "-5s", wantErr: "negative"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseDuration(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseDuration(%q) error = %v, want containing %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil || got.Std() != tt.want {
				t.Fatalf("ParseDuration(%q) = %v, %v; want %v", tt.in, got.Std(), err, tt.want)
			}
		})
	}
}

// FuzzParseSize checks that whatever parses round-trips through String.
func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"1KiB", "10MB", "4096", "1.5GiB", "10M", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseSize(s)
		if err != nil {
			return
		}
		back, err := ParseSize(v.String())
		if err != nil || back != v {
			t.Fatalf("round trip %q -> %d -> %q -> %d, %v", s, v, v.String(), back, err)
		}
	})
}

func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"1d", "1h30m", "500ms", "0.5d", "30"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseDuration(s)
		if err != nil {
			return
		}
		back, err := ParseDuration(v.String())
		if err != nil || back != v {
			t.Fatalf("round trip %q -> %v -> %q -> %v, %v", s, v.Std(), v.String(), back.Std(), err)
		}
	})
}
