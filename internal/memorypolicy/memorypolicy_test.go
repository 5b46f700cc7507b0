package memorypolicy

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

func TestGCPercentFor(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live uint64
		want int
	}{
		{0, 100},
		{1 * mib, 100},
		{HeadroomFloor, 100},    // headroom = live: the default
		{2 * HeadroomFloor, 50}, // the floor is half the live heap
		{100 * mib, 32},
		{128 * mib, 25}, // live/4 is the floor from here on
		{180 * mib, 25},
		{8 << 30, 25},
	} {
		if got := gcPercentFor(c.live); got != c.want {
			t.Errorf("gcPercentFor(%d MiB) = %d, want %d", c.live/mib, got, c.want)
		}
	}
}

func TestWantedOnlyWithoutTheUsersSettings(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want bool
	}{
		{nil, true},
		{map[string]string{"GOGC": "50"}, false},
		{map[string]string{"GOGC": "off"}, false},
		{map[string]string{"GOMEMLIMIT": "1GiB"}, false},
		{map[string]string{"GODEBUG": "gctrace=1"}, true},
	} {
		if got := Wanted(func(k string) string { return c.env[k] }); got != c.want {
			t.Errorf("env %v: wanted %v, want %v", c.env, got, c.want)
		}
	}
}

// TestFollowsTheLiveHeap keeps twice the floor live, collects,
// and waits for the policy to lower the GC percent; stop puts back 100.
func TestFollowsTheLiveHeap(t *testing.T) {
	set := make(chan int, 16)
	stop := start(func(p int) { set <- p })
	ballast := make([]byte, 2*HeadroomFloor)
	for i := range ballast {
		ballast[i] = byte(i)
	}
	runtime.GC()
	runtime.GC()
	select {
	case p := <-set:
		if p >= 100 || p < minGCPercent {
			t.Errorf("set GC percent %d with %d bytes live", p, len(ballast))
		}
	case <-time.After(time.Minute): // only a failure waits this long
		t.Fatal("the policy set no GC percent after two collections")
	}
	runtime.KeepAlive(ballast)
	stop()
	if old := debug.SetGCPercent(100); old != 100 {
		t.Errorf("after stop the GC percent is %d, want 100", old)
	}
}

// TestRelaxHoldsTheDefault: while relaxed the policy keeps GC percent
// 100 however much is live; released, it applies again at once.
func TestRelaxHoldsTheDefault(t *testing.T) {
	set := make(chan int, 16)
	stop := start(func(p int) { set <- p })
	defer stop()
	ballast := make([]byte, 2*HeadroomFloor)
	for i := range ballast {
		ballast[i] = byte(i)
	}
	release := Relax()
	runtime.GC()
	runtime.GC()
	if p := debug.SetGCPercent(100); p != 100 {
		t.Fatalf("relaxed, %d bytes live: GC percent %d, want 100", len(ballast), p)
	}
	for len(set) > 0 { // what it set before Relax
		<-set
	}
	release()
	release() // a second call changes nothing
	if len(set) != 1 {
		t.Fatalf("released: the policy set %d GC percents, want 1", len(set))
	}
	if p := <-set; p >= 100 || p < minGCPercent {
		t.Errorf("released: set GC percent %d with %d bytes live", p, len(ballast))
	}
	runtime.KeepAlive(ballast)
}

func TestRelaxWithoutAPolicyDoesNothing(t *testing.T) {
	debug.SetGCPercent(70)
	defer debug.SetGCPercent(100)
	Relax()()
	if p := debug.SetGCPercent(100); p != 70 {
		t.Errorf("GC percent %d after a Relax with no policy, want 70", p)
	}
}
