//go:build unix

package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock/clock"
)

// fakeWatchdog is the watchdog's logic on a fake clock, fed through a
// pipe, with what it sends and says recorded.
type fakeWatchdog struct {
	t       *testing.T
	clk     *clock.Fake
	in      *io.PipeWriter
	done    chan error
	mu      sync.Mutex
	sent    []string // signals and answers, in order: "SIGTERM", "tell:term", …
	reports []string
	waits   int  // times the watchdog has waited
	ended   bool // run has returned
}

var wdStart = time.Unix(0, 1_000_000_000_000)

// startFakeWatchdog runs a watchdog armed for SIGTERM term and SIGKILL kill
// after wdStart.
func startFakeWatchdog(t *testing.T, term, kill time.Duration) *fakeWatchdog {
	t.Helper()
	clk := clock.NewFake(wdStart)
	r, w := io.Pipe()
	f := &fakeWatchdog{t: t, clk: clk, in: w, done: make(chan error, 1)}
	wd := &watchdog{
		clk: clk,
		signal: func(s os.Signal) bool {
			f.record(signalName(s))
			return true
		},
		tell:    func(s string) { f.record("tell:" + s) },
		report:  func(why string, killIn time.Duration) { f.mu.Lock(); f.reports = append(f.reports, why); f.mu.Unlock() },
		parent:  4242,
		waiting: func() { f.mu.Lock(); f.waits++; f.mu.Unlock() },
		termAt:  wdStart.Add(term),
		killAt:  wdStart.Add(kill),
	}
	go func() {
		err := wd.run(r)
		f.mu.Lock()
		f.ended = true
		f.mu.Unlock()
		f.done <- err
	}()
	t.Cleanup(func() {
		w.Close()
		clk.Advance(time.Hour)
		select {
		case <-f.done:
		case <-time.After(10 * time.Second): // a hang, not a timing
			t.Error("the watchdog did not end")
		}
	})
	f.waitedMore(0)
	return f
}

func (f *fakeWatchdog) record(s string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sent = append(f.sent, s)
}

func (f *fakeWatchdog) got() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.sent)
}

func (f *fakeWatchdog) waitCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ended {
		return int(^uint(0) >> 1)
	}
	return f.waits
}

// waitedMore waits until the watchdog has waited more than n times (it
// has acted on everything before and waits again), or has returned.
func (f *fakeWatchdog) waitedMore(n int) {
	f.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); f.waitCount() <= n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			f.t.Fatal("the watchdog did not wait again")
		}
	}
}

// say sends line and waits until the watchdog has acted on it.
func (f *fakeWatchdog) say(line string) {
	f.t.Helper()
	n := f.waitCount()
	if _, err := io.WriteString(f.in, line+"\n"); err != nil {
		f.t.Fatal(err)
	}
	f.waitedMore(n)
}

// at moves the clock to wdStart+d and, if that fires the watchdog's
// timer, waits until the watchdog has acted on it.
func (f *fakeWatchdog) at(d time.Duration) {
	f.t.Helper()
	n := f.waitCount()
	due, ok := f.clk.Next()
	fires := ok && !f.clk.Now().Add(due).After(wdStart.Add(d))
	f.clk.Set(wdStart.Add(d))
	if fires {
		f.waitedMore(n)
	}
}

// want checks what the watchdog has sent so far.
func (f *fakeWatchdog) want(what string, sent ...string) {
	f.t.Helper()
	if got := f.got(); !slices.Equal(got, sent) {
		f.t.Fatalf("%s: sent %q, want %q", what, got, sent)
	}
}

// killsOnTime is the check of the watchdog's deadlines: nothing sent a
// nanosecond before term, SIGTERM (and SIGCONT) at term, nothing more a
// nanosecond before kill, SIGKILL at kill.
func killsOnTime(f *fakeWatchdog, term, kill time.Duration) error {
	check := func(what string, want ...string) error {
		if got := f.got(); !slices.Equal(got, want) {
			return fmt.Errorf("%s: sent %q, want %q", what, got, want)
		}
		return nil
	}
	steps := []struct {
		at   time.Duration
		what string
		want []string
	}{
		{term - time.Nanosecond, "a tick before SIGTERM is due", nil},
		{term, "when SIGTERM is due", []string{"tell:term", "SIGTERM", "SIGCONT"}},
		{kill - time.Nanosecond, "a tick before SIGKILL is due", []string{"tell:term", "SIGTERM", "SIGCONT"}},
		{kill, "when SIGKILL is due", []string{"tell:term", "SIGTERM", "SIGCONT", "tell:kill", "SIGKILL"}},
	}
	for _, s := range steps {
		f.at(s.at)
		if err := check(s.what, s.want...); err != nil {
			return err
		}
	}
	return nil
}

// TestWatchdogStopsCMDOnTimeUnlessPushed: with no push, the watchdog sends
// CMD's group SIGTERM (and SIGCONT) at the lease's deadline and SIGKILL at
// its stop-by time, to the nanosecond, whatever lock is doing. The check
// is proven sharp on a plant: told the deadlines a tick earlier than the
// watchdog's (as if it fired a tick late), it fails.
func TestWatchdogStopsCMDOnTimeUnlessPushed(t *testing.T) {
	const term, kill = 2670 * time.Millisecond, 2970 * time.Millisecond
	f := startFakeWatchdog(t, term, kill)
	if err := killsOnTime(f, term, kill); err != nil {
		t.Fatal(err)
	}
	if len(f.reports) != 2 || !strings.Contains(f.reports[0], "fencelock (pid 4242) confirmed no extension by the lease's deadline") {
		t.Fatalf("reports %q", f.reports)
	}
	for _, late := range []struct{ term, kill time.Duration }{{term - time.Nanosecond, kill}, {term, kill - time.Nanosecond}} {
		p := startFakeWatchdog(t, term, kill)
		if err := killsOnTime(p, late.term, late.kill); err == nil {
			t.Fatalf("the check passed a watchdog that fires a tick after %v, %v", late.term, late.kill)
		} else {
			t.Logf("the plant is caught: %v", err)
		}
	}
}

// TestWatchdogFollowsPushes: each push moves both deadlines; nothing is
// sent at the old ones.
func TestWatchdogFollowsPushes(t *testing.T) {
	f := startFakeWatchdog(t, 2*time.Second, 3*time.Second)
	f.at(time.Second)
	f.say(fmt.Sprintf("arm %d %d", wdStart.Add(4*time.Second).UnixNano(), wdStart.Add(5*time.Second).UnixNano()))
	f.at(3 * time.Second)
	f.want("past the first deadlines, pushed", []string(nil)...)
	if err := killsOnTime(f, 4*time.Second, 5*time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestWatchdogEndLeavesSIGTERMToLock: lock ends CMD itself (it sent
// SIGTERM); the watchdog sends no SIGTERM, says nothing, and still sends
// SIGKILL by the stop-by time.
func TestWatchdogEndLeavesSIGTERMToLock(t *testing.T) {
	f := startFakeWatchdog(t, 2*time.Second, 3*time.Second)
	f.at(time.Second)
	f.say(fmt.Sprintf("end %d", wdStart.Add(2500*time.Millisecond).UnixNano()))
	f.at(2 * time.Second)
	f.want("at the deadline after end", []string(nil)...)
	f.at(2500 * time.Millisecond)
	f.want("at end's SIGKILL time", "tell:kill", "SIGKILL")
	if len(f.reports) != 0 {
		t.Fatalf("reports %q, want none: lock says what it does", f.reports)
	}
	// A push after that changes nothing.
	f.say(fmt.Sprintf("arm %d %d", wdStart.Add(time.Hour).UnixNano(), wdStart.Add(time.Hour).UnixNano()))
	f.want("after a late push", "tell:kill", "SIGKILL")
}

// TestWatchdogOrphaned: lock goes away without a word (kill -9), or says
// something unreadable: SIGTERM at once, SIGKILL at the stop-by time, and
// the watchdog is done.
func TestWatchdogOrphaned(t *testing.T) {
	for _, how := range []string{"eof", "garbage"} {
		t.Run(how, func(t *testing.T) {
			f := startFakeWatchdog(t, 2*time.Second, 3*time.Second)
			f.at(time.Second)
			if how == "eof" {
				n := f.waitCount()
				f.in.Close()
				f.waitedMore(n)
			} else {
				f.say("arm soon")
			}
			f.want("at once", "tell:term", "SIGTERM", "SIGCONT")
			if len(f.reports) != 1 || !strings.Contains(f.reports[0], "fencelock (pid 4242) went away while CMD ran") {
				t.Fatalf("reports %q", f.reports)
			}
			f.at(3*time.Second - time.Nanosecond)
			f.want("before the stop-by time", "tell:term", "SIGTERM", "SIGCONT")
			f.at(3 * time.Second)
			f.want("at the stop-by time", "tell:term", "SIGTERM", "SIGCONT", "tell:kill", "SIGKILL")
			if how == "eof" {
				select {
				case err := <-f.done:
					if err != nil {
						t.Fatal(err)
					}
					f.done <- nil // for the cleanup
				case <-time.After(10 * time.Second): // a hang, not a timing
					t.Fatal("the watchdog goes on after its SIGKILL with lock gone")
				}
			}
		})
	}
}

// TestWatchdogQuit: quit ends the watchdog at once, with nothing sent.
func TestWatchdogQuit(t *testing.T) {
	f := startFakeWatchdog(t, 2*time.Second, 3*time.Second)
	if _, err := io.WriteString(f.in, "quit\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-f.done:
		if err != nil {
			t.Fatal(err)
		}
		f.done <- nil
	case <-time.After(10 * time.Second): // a hang, not a timing
		t.Fatal("quit did not end the watchdog")
	}
	f.want("after quit", []string(nil)...)
}
