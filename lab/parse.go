package lab

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// ParseDurations reads a comma-separated list such as "1s,5s,500ms" or
// "1,5,0.5". A bare number is seconds, like the page's Python literals. The
// result is not range-checked beyond what a time.Duration can hold; Validate
// does that.
func ParseDurations(s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, field := range strings.Split(s, ",") {
		field = strings.TrimSpace(field)
		if field == "" {
			return nil, fmt.Errorf("%w: empty item in list %q", ErrConfig, s)
		}
		d, err := parseDuration(field)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

func parseDuration(s string) (time.Duration, error) {
	if d, err := time.ParseDuration(s); err == nil {
		return d, nil
	}
	x, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
		return 0, fmt.Errorf("%w: %q is neither a duration (1.5s, 10ms) nor a number of seconds", ErrConfig, s)
	}
	if math.Abs(x) > maxDuration.Seconds() {
		return 0, fmt.Errorf("%w: %q seconds is more than %v", ErrConfig, s, maxDuration)
	}
	return time.Duration(math.Round(x * 1e9)), nil
}

// Durations is a duration list usable as a flag.Value, so a flag's default
// is printed from the Config it writes into.
type Durations []time.Duration

// Set replaces the list with the parsed s.
func (d *Durations) Set(s string) error {
	v, err := ParseDurations(s)
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// String prints the list in a form Set reads back: 1s,5s,500ms.
func (d Durations) String() string {
	parts := make([]string, len(d))
	for i, x := range d {
		if x%time.Second == 0 {
			parts[i] = strconv.FormatInt(int64(x/time.Second), 10) + "s"
		} else {
			parts[i] = x.String()
		}
	}
	return strings.Join(parts, ",")
}
