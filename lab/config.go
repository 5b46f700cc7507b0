package lab

import (
	"errors"
	"fmt"
	"time"
)

// Config holds the knobs of the two simulations. DefaultConfig reproduces the
// page; anything else explores around it.
type Config struct {
	SizingSeed   int64           // block 5's random.Random seed (page: 11)
	AssemblySeed int64           // the assembly's seed (page: 23)
	Ops          int             // operations per simulation (page: 20,000)
	TTLs         []time.Duration // block 5's lease lengths (page: 1, 5, 10, 30, 60 s)
	Gaps         []time.Duration // the assembly's check→write sweep (page: 1 ms … 1 s)
	CheckGap     time.Duration   // the gap in the assembly's design table (page: 2 ms)
}

// Limits keep a mistyped flag from asking for minutes of work or gigabytes.
const (
	MaxOps       = 2_000_000
	MaxListItems = 64
	maxDuration  = 24 * time.Hour
)

// ErrConfig wraps every reason Validate refuses a Config.
var ErrConfig = errors.New("lab: bad configuration")

// DefaultConfig returns the page's parameters.
func DefaultConfig() Config {
	return Config{
		SizingSeed:   11,
		AssemblySeed: 23,
		Ops:          20_000,
		TTLs:         []time.Duration{1 * time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second, 60 * time.Second},
		Gaps:         []time.Duration{1 * time.Millisecond, 10 * time.Millisecond, 100 * time.Millisecond, 1 * time.Second},
		CheckGap:     2 * time.Millisecond,
	}
}

// Validate reports the first problem with c, wrapped in ErrConfig.
func (c Config) Validate() error {
	if c.Ops < 1 || c.Ops > MaxOps {
		return fmt.Errorf("%w: operation count %d is outside 1..%d", ErrConfig, c.Ops, MaxOps)
	}
	if err := checkList("TTL", c.TTLs, false); err != nil {
		return err
	}
	if err := checkList("gap", c.Gaps, true); err != nil {
		return err
	}
	if c.CheckGap < 0 || c.CheckGap > maxDuration {
		return fmt.Errorf("%w: check gap %v is outside 0..%v", ErrConfig, c.CheckGap, maxDuration)
	}
	return nil
}

func checkList(what string, ds []time.Duration, zeroOK bool) error {
	if len(ds) == 0 || len(ds) > MaxListItems {
		return fmt.Errorf("%w: want 1..%d %s values, got %d", ErrConfig, MaxListItems, what, len(ds))
	}
	for _, d := range ds {
		if d < 0 || (d == 0 && !zeroOK) || d > maxDuration {
			return fmt.Errorf("%w: %s %v is outside the allowed range (up to %v)", ErrConfig, what, d, maxDuration)
		}
	}
	return nil
}

// seconds converts a duration to the float the page's Python would hold:
// one correctly rounded division, so 1ms becomes exactly the literal 0.001.
func seconds(d time.Duration) float64 { return float64(d) / 1e9 }

// millis is the same for milliseconds, used for labels.
func millis(d time.Duration) float64 { return float64(d) / 1e6 }
