package lab

import (
	"errors"
	"testing"
	"time"

	"github.com/fencelock/fencelock/fence"
)

func TestEpisodeOnTheLockTable(t *testing.T) {
	cases := []struct {
		name    string
		e       episode
		granted bool
		writers string
		final   int
	}{
		{"inside the lease", episode{pause: 9900 * time.Millisecond}, false, "A", valueA},
		{"at the expiry instant", episode{pause: 10 * time.Second}, true, "BA", valueA},
		{"one nanosecond early", episode{pause: 10*time.Second - 1}, false, "A", valueA},
		{"past the lease", episode{pause: pagePause}, true, "BA", valueA},
		{"fenced", episode{pause: pagePause, fenced: true}, true, "B", valueB},
		{"check after the pause", episode{pause: pagePause, check: checkAfterPause}, true, "B", valueB},
		{"check before the pause", episode{pause: pagePause, check: checkBeforePause}, true, "BA", valueA},
		{"fenced and checked too late", episode{pause: pagePause, check: checkBeforePause, fenced: true}, true, "B", valueB},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.e.ttl = pageTTL
			out, err := c.e.run()
			if err != nil {
				t.Fatal(err)
			}
			if out.bGranted() != c.granted || out.writers() != c.writers || out.final() != c.final {
				t.Errorf("granted %v writers %q final %d; want %v %q %d",
					out.bGranted(), out.writers(), out.final(), c.granted, c.writers, c.final)
			}
		})
	}
}

func TestFencedEpisodeRefusesWithTheGuardsError(t *testing.T) {
	out, err := episode{ttl: pageTTL, pause: pagePause, fenced: true}.run()
	if err != nil {
		t.Fatal(err)
	}
	var stale *fence.StaleTokenError
	if !errors.As(out.errA, &stale) || stale.Token != 1 || stale.Highest != 2 {
		t.Fatalf("A's refusal: %v", out.errA)
	}
	if out.tokenA != 1 || out.tokenB != 2 {
		t.Errorf("tokens %d and %d, want 1 and 2 (a fresh table starts at 1)", out.tokenA, out.tokenB)
	}
}

func TestBlockErrors(t *testing.T) {
	for _, n := range []int{0, 7, -1} {
		if _, err := Block(n, DefaultConfig()); !errors.Is(err, ErrNoSuchBlock) {
			t.Errorf("Block(%d): %v", n, err)
		}
	}
	bad := DefaultConfig()
	bad.Ops = 0
	if _, err := Block(5, bad); !errors.Is(err, ErrConfig) {
		t.Errorf("Block with a bad config: %v", err)
	}
	if err := Print(nil, Options{Config: DefaultConfig(), Quiet: true, Block: 2}); !errors.Is(err, ErrConfig) {
		t.Errorf("quiet with a block: %v", err)
	}
}
