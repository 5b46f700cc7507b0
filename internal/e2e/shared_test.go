//go:build unix

package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/fencelock/fencelock/client"
)

// TestSharedFaults runs semaphores, read/write locks and multi-key
// acquires under kill -9 of the leader, SIGSTOP of the leader, a change of
// membership (the leader removed and a fresh node joined in its place)
// and, where network namespaces are available, a partition of the leader:
// workers on their own clients take permits of a 2-permit semaphore, read
// or write holds of a read/write lock (waiting, holding a little,
// releasing; client.Lease keeps each alive), and two of three keys at once
// under a session (client.Session keeps them alive); CheckShared checks
// the holds as the clients saw them. A few seconds a class.
func TestSharedFaults(t *testing.T) {
	fencelockBinary(t)
	t.Parallel()
	seed := suiteSeed(t)
	faults := append(leaderFaults(), leaderFault{"membership", false, func(c *cluster) error {
		return c.replace(t, c.leader(60*time.Second))
	}})
	for _, tc := range faults {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("seed %d; replay: go test ./internal/e2e -run 'TestSharedFaults/%s$' -v -seed %d", seed, tc.name, seed)
				}
			})
			if tc.netns {
				if why := netnsUnavailable(); why != "" {
					t.Skipf("skipping: %s", why)
				}
			}
			c := startCluster(t, 3, tc.netns)
			holds, errs := sharedLoad(t, c, seed, tc.fault)
			for _, e := range errs {
				t.Error(e)
			}
			var lost, writes, multi int
			for _, h := range holds {
				if h.Lost {
					lost++
				}
				if h.Write {
					writes++
				}
				if strings.HasPrefix(h.Key, "m") {
					multi++
				}
			}
			t.Logf("%s: %d holds (%d writes, %d of them keys of multi-key acquires), %d lost", tc.name, len(holds), writes, multi, lost)
			if len(holds) < 10 || multi < 4 {
				t.Fatalf("only %d holds, %d of multi-key acquires: the run checked too little", len(holds), multi)
			}
			for _, v := range CheckShared(holds, map[string]int{"sem": 2}) {
				t.Errorf("%v", v)
			}
		})
	}
}

// sharedLoad runs the workers for a while, injects the fault, runs them a
// while longer, and returns every hold.
func sharedLoad(t *testing.T, c *cluster, seed int64, inject func(*cluster) error) ([]Hold, []error) {
	t0 := time.Now()
	since := func(at time.Time) time.Duration { return at.Sub(t0) }
	var (
		mu    sync.Mutex
		holds []Hold
		errs  []error
		wg    sync.WaitGroup
	)
	stop := make(chan struct{})
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(seed), uint64(w)))
			cl, err := client.New(c.addrs())
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				return
			}
			defer cl.Close()
			for {
				select {
				case <-stop:
					return
				default:
				}
				key, write := "sem", false
				opts := []client.LeaseOption{client.WithTTL(3 * time.Second), client.WithWait(2 * time.Second)}
				switch p := rng.IntN(10); {
				case p < 5:
					opts = append(opts, client.WithPermits(2))
				case p < 8:
					key = "rw"
					opts = append(opts, client.WithRead())
				default:
					key, write = "rw", true
					opts = append(opts, client.WithWrite())
				}
				ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
				l, err := cl.Acquire(ctx, key, opts...)
				cancel()
				if err != nil {
					if !errors.Is(err, client.ErrHeld) && !errors.Is(err, client.ErrUnavailable) && !errors.Is(err, client.ErrUnreachable) {
						mu.Lock()
						errs = append(errs, fmt.Errorf("acquire %s: %w", key, err))
						mu.Unlock()
					}
					continue
				}
				h := Hold{Key: key, Holder: l.Holder(), Token: l.Token(), Write: write, Start: since(time.Now())}
				select {
				case <-time.After(time.Duration(20+rng.IntN(150)) * time.Millisecond):
				case <-l.Done():
				}
				h.End = since(time.Now())
				if l.Err() != nil { // lost: the client stopped counting on it at its deadline
					h.Lost = true
					h.End = min(h.End, since(l.Deadline()))
				}
				rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
				_ = l.Release(rctx)
				rcancel()
				mu.Lock()
				holds = append(holds, h)
				mu.Unlock()
			}
		}()
	}
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h, err := multiKeyWorker(c, seed, w, since, stop)
			mu.Lock()
			defer mu.Unlock()
			holds = append(holds, h...)
			if err != nil {
				errs = append(errs, err)
			}
		}()
	}
	time.Sleep(1500 * time.Millisecond)
	if err := inject(c); err != nil {
		errs = append(errs, err)
	}
	time.Sleep(1500 * time.Millisecond)
	close(stop)
	wg.Wait()
	return holds, errs
}

// multiKeyWorker takes two of the keys m1, m2, m3 at once under a session
// (kept alive by client.Session), holds them a little and releases them,
// until stop; a session lost in a fault is replaced by a new one. Each
// key's hold is recorded as a writer's, so CheckShared allows nothing
// beside it.
func multiKeyWorker(c *cluster, seed int64, w int, since func(time.Time) time.Duration, stop <-chan struct{}) ([]Hold, error) {
	rng := rand.New(rand.NewPCG(uint64(seed), uint64(100+w)))
	cl, err := client.New(c.addrs())
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var holds []Hold
	var s *client.Session
	defer func() {
		if s != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = s.Close(ctx)
			cancel()
		}
	}()
	keys := []string{"m1", "m2", "m3"}
	for {
		select {
		case <-stop:
			return holds, nil
		default:
		}
		if s == nil || s.Err() != nil {
			if s != nil {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_ = s.Close(ctx)
				cancel()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			s, err = client.NewSession(ctx, cl, client.WithSessionTTL(3*time.Second), client.WithSessionHolder(fmt.Sprintf("multi-%d", w)))
			cancel()
			if err != nil {
				s = nil
				if errors.Is(err, client.ErrUnavailable) || errors.Is(err, client.ErrUnreachable) || errors.Is(err, context.DeadlineExceeded) {
					continue
				}
				return holds, fmt.Errorf("session open: %w", err)
			}
		}
		skip := rng.IntN(len(keys))
		var pick []string
		for i, k := range keys {
			if i != skip {
				pick = append(pick, k)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		lks, err := s.AcquireAll(ctx, pick, client.WithWait(2*time.Second))
		cancel()
		if err != nil {
			if errors.Is(err, client.ErrHeld) || errors.Is(err, client.ErrUnavailable) || errors.Is(err, client.ErrUnreachable) ||
				errors.Is(err, context.DeadlineExceeded) || s.Err() != nil {
				continue
			}
			return holds, fmt.Errorf("acquire-all %v: %w", pick, err)
		}
		start := since(time.Now())
		select {
		case <-time.After(time.Duration(20+rng.IntN(150)) * time.Millisecond):
		case <-s.Done():
		}
		end := since(time.Now())
		lost := s.Err() != nil && !errors.Is(s.Err(), client.ErrSessionClosed)
		if lost {
			end = min(end, since(s.Deadline()))
		}
		for _, lk := range lks {
			holds = append(holds, Hold{Key: lk.Key(), Holder: s.Holder(), Token: lk.Token(), Write: true, Start: start, End: end, Lost: lost})
			rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = lk.Release(rctx)
			rcancel()
		}
	}
}

// TestSharedLinearizable records try-once acquires and releases of a
// 2-permit semaphore and a read/write lock (TTL one minute, so nothing
// expires within a run) across kill -9 and SIGSTOP of the leader and,
// where network namespaces are available, a partition of it, and checks
// the history against SharedModel with porcupine.
func TestSharedLinearizable(t *testing.T) {
	linearizableUnderFaults(t, "TestSharedLinearizable", CheckSharedLinearizable, sharedHistory)
}

// linearizableUnderFaults runs history under each of leaderFaults on a
// fresh 3-node cluster and checks what it recorded with check.
func linearizableUnderFaults[R recorded](t *testing.T, test string, check func([]R, time.Duration) (porcupine.CheckResult, int),
	history func(c *cluster, seed int64, fault func(*cluster) error) ([]R, []error)) {
	fencelockBinary(t)
	t.Parallel()
	seed := suiteSeed(t)
	for _, tc := range leaderFaults() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("seed %d; replay: go test ./internal/e2e -run '%s/%s$' -v -seed %d", seed, test, tc.name, seed)
				}
			})
			if tc.netns {
				if why := netnsUnavailable(); why != "" {
					t.Skipf("skipping: %s", why)
				}
			}
			c := startCluster(t, 3, tc.netns)
			ops, errs := history(c, seed, tc.fault)
			for _, e := range errs {
				t.Error(e)
			}
			var grants, unknown int
			for _, o := range ops {
				if o.grant() {
					grants++
				}
				if o.unknown() {
					unknown++
				}
			}
			res, n := check(ops, time.Minute)
			t.Logf("%s: %d operations (%d grants, %d unknown): %v", tc.name, n, grants, unknown, res)
			if grants < 10 {
				t.Fatalf("only %d grants: the run checked too little", grants)
			}
			if res != porcupine.Ok {
				for _, o := range ops {
					client, _, _, call, ret := o.record()
					t.Logf("client %d [%v, %v] %v", client, call, ret, o)
				}
				t.Fatalf("the history is not linearizable: %v", res)
			}
		})
	}
}

// sharedHistory runs try-once workers on "psem" (2 permits) and "prw"
// (read 70%, write 30%), injects the fault after a while, and returns
// every call as its client saw it. A worker whose acquire or release had
// no definite answer takes a new holder name: the hold may be there.
func sharedHistory(c *cluster, seed int64, fault func(*cluster) error) ([]SharedOp, []error) {
	return loadUnderFault(c, 6, fault, func(w int, cl *client.Client, since func() time.Duration, record func(SharedOp), fail func(error), stop <-chan struct{}) {
		rng := rand.New(rand.NewPCG(uint64(seed), uint64(200+w)))
		gen := 0
		for {
			select {
			case <-stop:
				return
			default:
			}
			holder := fmt.Sprintf("p%d-%d", w, gen)
			in := SharedInput{Kind: SharedAcquire, Key: "psem", Holder: holder, Permits: 2}
			opts := []client.LeaseOption{client.WithTTL(time.Minute), client.WithHolder(holder)}
			if w%2 == 1 {
				in.Key, in.Permits, in.Write = "prw", 0, rng.IntN(10) < 3
				if in.Write {
					opts = append(opts, client.WithWrite())
				} else {
					opts = append(opts, client.WithRead())
				}
			} else {
				opts = append(opts, client.WithPermits(2))
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			call := since()
			l, err := cl.TryAcquire(ctx, in.Key, opts...)
			ret := since()
			cancel()
			o := SharedOp{Client: w, Input: in, Call: call, Return: ret}
			switch {
			case err == nil:
				o.Output = SharedOutput{Result: OK, Token: l.Token()}
			case errors.Is(err, client.ErrHeld):
				o.Output = SharedOutput{Result: Refused}
			case errors.Is(err, client.ErrUnavailable) || errors.Is(err, client.ErrUnreachable) || errors.Is(err, context.DeadlineExceeded):
				gen++
			default:
				fail(fmt.Errorf("acquire %s: %w", in.Key, err))
				gen++
			}
			record(o)
			if err != nil {
				time.Sleep(time.Duration(5+rng.IntN(20)) * time.Millisecond)
				continue
			}
			time.Sleep(time.Duration(10+rng.IntN(50)) * time.Millisecond)
			rin := SharedInput{Kind: SharedRelease, Key: in.Key, Holder: holder, Token: l.Token()}
			ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
			call = since()
			err = l.Release(ctx)
			ret = since()
			cancel()
			r := SharedOp{Client: w, Input: rin, Call: call, Return: ret}
			var le *client.LostError
			switch {
			case err == nil:
				r.Output = SharedOutput{Result: OK, Released: true}
			case errors.Is(err, client.ErrNotHeld) && !errors.As(err, &le):
				r.Output = SharedOutput{Result: OK}
			default:
				gen++ // it may still be held
			}
			record(r)
		}
	})
}

// leaderFault is one of the faults the linearizability tests of the
// shared primitives run under.
type leaderFault struct {
	name  string
	netns bool
	fault func(c *cluster) error
}

func leaderFaults() []leaderFault {
	return []leaderFault{
		{"leader-kill", false, func(c *cluster) error {
			l := c.leader(60 * time.Second)
			c.kill(l)
			time.Sleep(700 * time.Millisecond) // down a while: the others elect
			c.start(l)
			return nil
		}},
		{"leader-stop", false, func(c *cluster) error {
			l := c.leader(60 * time.Second)
			c.signal(l, syscall.SIGSTOP)
			defer c.signal(l, syscall.SIGCONT)
			if c.waitLeader(l, 60*time.Second) == nil {
				return fmt.Errorf("no other leader within 60s of stopping %s", l.id)
			}
			time.Sleep(500 * time.Millisecond) // the old leader stays frozen a while
			return nil
		}},
		{"partition", true, func(c *cluster) error {
			l := c.leader(60 * time.Second)
			if err := c.isolate(l, true); err != nil {
				return err
			}
			if c.waitLeader(l, 60*time.Second) == nil {
				_ = c.isolate(l, false)
				return fmt.Errorf("no other leader within 60s of isolating %s", l.id)
			}
			time.Sleep(500 * time.Millisecond)
			return c.isolate(l, false)
		}},
	}
}

// TestMultiKeyLinearizable records try-once acquires of two of the keys
// m1, m2, m3 at once and releases of each (TTL one minute: nothing
// expires within a run) across the same faults, and checks the history
// against MultiModel with porcupine: all of a multi-key acquire or none.
func TestMultiKeyLinearizable(t *testing.T) {
	linearizableUnderFaults(t, "TestMultiKeyLinearizable", CheckMultiLinearizable, multiHistory)
}

// multiHistory runs 4 workers that take two of MultiKeys at once, hold
// them a little and release each, injects the fault after a while, and
// returns every call as its client saw it. A worker whose call had no
// definite answer takes a new holder name.
func multiHistory(c *cluster, seed int64, fault func(*cluster) error) ([]MultiOp, []error) {
	definite := func(err error) bool {
		return !(errors.Is(err, client.ErrUnavailable) || errors.Is(err, client.ErrUnreachable) || errors.Is(err, context.DeadlineExceeded))
	}
	return loadUnderFault(c, 4, fault, func(w int, cl *client.Client, since func() time.Duration, record func(MultiOp), fail func(error), stop <-chan struct{}) {
		rng := rand.New(rand.NewPCG(uint64(seed), uint64(300+w)))
		gen := 0
		for {
			select {
			case <-stop:
				return
			default:
			}
			holder := fmt.Sprintf("mk%d-%d", w, gen)
			skip := rng.IntN(len(MultiKeys))
			var keys []string
			for i, k := range MultiKeys {
				if i != skip {
					keys = append(keys, k)
				}
			}
			in := MultiInput{Kind: MultiAcquire, Keys: strings.Join(keys, ","), Holder: holder}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			call := since()
			lks, err := cl.AcquireAll(ctx, keys, holder, time.Minute, client.GrantOptions{})
			ret := since()
			cancel()
			o := MultiOp{Client: w, Input: in, Call: call, Return: ret}
			switch {
			case err == nil:
				toks := make([]string, len(lks))
				for i, lk := range lks {
					toks[i] = fmt.Sprint(lk.Token)
				}
				o.Output = MultiOutput{Result: OK, Tokens: strings.Join(toks, ",")}
			case errors.Is(err, client.ErrHeld):
				o.Output = MultiOutput{Result: Refused}
			case !definite(err):
				gen++
			default:
				fail(fmt.Errorf("acquire-all %v: %w", keys, err))
				gen++
			}
			record(o)
			if err != nil {
				time.Sleep(time.Duration(5+rng.IntN(20)) * time.Millisecond)
				continue
			}
			time.Sleep(time.Duration(10+rng.IntN(50)) * time.Millisecond)
			for _, lk := range lks {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				call := since()
				ok, err := cl.Release(ctx, lk.Key, holder, lk.Token)
				ret := since()
				cancel()
				r := MultiOp{Client: w, Input: MultiInput{Kind: MultiRelease, Keys: lk.Key, Holder: holder, Token: lk.Token}, Call: call, Return: ret}
				switch {
				case err == nil:
					r.Output = MultiOutput{Result: OK, Released: ok}
				case !definite(err):
					gen++ // it may still be held
				default:
					fail(fmt.Errorf("release %s: %w", lk.Key, err))
					gen++
				}
				record(r)
			}
		}
	})
}

// loadUnderFault runs n workers, each on its own client given every
// node's address, injects fault after a while of load, loads a while
// longer, stops them and returns what they recorded. A worker records
// its calls with record (timed by since, from the start), reports what
// it cannot make sense of with fail, and returns once stop is closed.
func loadUnderFault[R any](c *cluster, n int, fault func(*cluster) error,
	worker func(w int, cl *client.Client, since func() time.Duration, record func(R), fail func(error), stop <-chan struct{})) ([]R, []error) {
	t0 := time.Now()
	since := func() time.Duration { return time.Since(t0) }
	var (
		mu   sync.Mutex
		ops  []R
		errs []error
		wg   sync.WaitGroup
	)
	record := func(o R) {
		mu.Lock()
		ops = append(ops, o)
		mu.Unlock()
	}
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	stop := make(chan struct{})
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl, err := client.New(c.addrs())
			if err != nil {
				fail(err)
				return
			}
			defer cl.Close()
			worker(w, cl, since, record, fail, stop)
		}()
	}
	time.Sleep(1200 * time.Millisecond)
	if err := fault(c); err != nil {
		fail(err)
	}
	time.Sleep(1200 * time.Millisecond)
	close(stop)
	wg.Wait()
	return ops, errs
}
