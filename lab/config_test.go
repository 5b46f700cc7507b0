package lab

import (
	"errors"
	"slices"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	for name, mut := range map[string]func(*Config){
		"no ops":        func(c *Config) { c.Ops = 0 },
		"too many ops":  func(c *Config) { c.Ops = MaxOps + 1 },
		"no TTLs":       func(c *Config) { c.TTLs = nil },
		"zero TTL":      func(c *Config) { c.TTLs = []time.Duration{0} },
		"negative gap":  func(c *Config) { c.Gaps = []time.Duration{-time.Millisecond} },
		"huge gap":      func(c *Config) { c.Gaps = []time.Duration{48 * time.Hour} },
		"long list":     func(c *Config) { c.Gaps = make([]time.Duration, MaxListItems+1) },
		"negative gap2": func(c *Config) { c.CheckGap = -1 },
	} {
		c := DefaultConfig()
		mut(&c)
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: got %v, want ErrConfig", name, err)
		}
	}
	c := DefaultConfig()
	c.Gaps = []time.Duration{0}
	if err := c.Validate(); err != nil {
		t.Errorf("a zero gap is a legitimate question: %v", err)
	}
}

func TestParseDurations(t *testing.T) {
	for in, want := range map[string][]time.Duration{
		"1s,5s,10s":      {time.Second, 5 * time.Second, 10 * time.Second},
		"1, 0.5 ,60":     {time.Second, 500 * time.Millisecond, time.Minute},
		"1ms,10ms,1.5s":  {time.Millisecond, 10 * time.Millisecond, 1500 * time.Millisecond},
		"0.001,0.3":      {time.Millisecond, 300 * time.Millisecond},
		"250us":          {250 * time.Microsecond},
		"-1":             {-time.Second}, // parsed; Validate refuses it
		"1e-3":           {time.Millisecond},
		"2m":             {2 * time.Minute},
		"0":              {0},
		"86400":          {24 * time.Hour},
		"0.0000000004":   {0}, // rounds to the nanosecond
		"10.1, 9.9, 2.0": {10100 * time.Millisecond, 9900 * time.Millisecond, 2 * time.Second},
	} {
		got, err := ParseDurations(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("ParseDurations(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", ",", "1s,", "abc", "NaN", "inf", "1e300", "5 s"} {
		if _, err := ParseDurations(in); !errors.Is(err, ErrConfig) {
			t.Errorf("ParseDurations(%q): got %v, want ErrConfig", in, err)
		}
	}
}

// A gap written as a duration must reach the simulation as the very float
// the page's Python literal is, or a comparison could tip.
func TestSecondsAreThePythonLiterals(t *testing.T) {
	for d, lit := range map[time.Duration]float64{
		time.Millisecond:         0.001,
		10 * time.Millisecond:    0.010,
		100 * time.Millisecond:   0.100,
		time.Second:              1.000,
		2 * time.Millisecond:     0.002,
		10100 * time.Millisecond: 10.1,
	} {
		if got := seconds(d); got != lit {
			t.Errorf("seconds(%v) = %v, want the literal %v", d, got, lit)
		}
	}
}

func TestDurationsRoundTrip(t *testing.T) {
	for _, in := range []string{"1s,5s,10s,30s,60s", "1ms,10ms,100ms,1s", "500ms,1.5s,2m0s", "0s"} {
		var d Durations
		if err := d.Set(in); err != nil {
			t.Fatal(err)
		}
		var back Durations
		if err := back.Set(d.String()); err != nil || !slices.Equal(d, back) {
			t.Errorf("%q -> %q -> %v, %v", in, d.String(), back, err)
		}
	}
	if got := Durations(DefaultConfig().TTLs).String(); got != "1s,5s,10s,30s,60s" {
		t.Errorf("default TTLs print as %q", got)
	}
}

func FuzzParseDurations(f *testing.F) {
	for _, s := range []string{"1s,5s", "0.5", "1ms,1e-3", "", ",,", "9223372036854775807ns"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ds, err := ParseDurations(s)
		if err != nil {
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("error %v does not wrap ErrConfig", err)
			}
			return
		}
		if len(ds) == 0 {
			t.Fatalf("no error and no durations for %q", s)
		}
	})
}
