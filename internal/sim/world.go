package sim

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/fencelock/fencelock/internal/e2e"
	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/service"
)

// Config is one world's shape.
type Config struct {
	Nodes   int           // voters (3)
	Clients int           // client processes, each running one actor
	Horizon time.Duration // virtual time the actors start work for
	Faults  bool          // run the nemesis
	// FastLeader plants a fault beyond the design's bound: every leader
	// elected after the first runs its clock this much fast (0.25: 25%).
	FastLeader float64
	// Verbose traces every event of the committed log too.
	Verbose bool
}

// DefaultConfig is the world `go test ./internal/sim` runs.
func DefaultConfig() Config {
	return Config{Nodes: 3, Clients: 4, Horizon: 20 * time.Second, Faults: true}
}

func (Config) replDelay(r *rand.Rand) time.Duration {
	if r.IntN(50) == 0 {
		return 5*time.Millisecond + time.Duration(r.Int64N(int64(30*time.Millisecond)))
	}
	return 50*time.Microsecond + time.Duration(r.Int64N(int64(2*time.Millisecond)))
}

func (Config) commitDelay(r *rand.Rand) time.Duration {
	return 200*time.Microsecond + time.Duration(r.Int64N(int64(1300*time.Microsecond)))
}

// electionDelay is a heartbeat timeout and a randomised election timeout
// of the server's default raft timing (500 ms each): 0.6–1.3 s.
func (Config) electionDelay(r *rand.Rand) time.Duration {
	return 600*time.Millisecond + time.Duration(r.Int64N(int64(700*time.Millisecond)))
}

func (Config) leaseTimeout(r *rand.Rand) time.Duration {
	return 500*time.Millisecond + time.Duration(r.Int64N(int64(500*time.Millisecond)))
}

// world is one seeded run.
type world struct {
	seed    uint64
	cfg     Config
	t0      time.Time
	verbose bool // trace every event of the committed log

	mu         sync.Mutex
	trace      []string
	violations []string
	elections  int
	elected    []time.Time // when each leader was elected
	faults     []fault     // every fault, once healed
	cl         *cluster
	hist       *history
	probes     *probes
}

func (w *world) tracef(format string, args ...any) {
	line := fmt.Sprintf("%12s ", time.Since(w.t0)) + fmt.Sprintf(format, args...)
	w.mu.Lock()
	w.trace = append(w.trace, line)
	w.mu.Unlock()
}

func (w *world) violate(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	w.tracef("VIOLATION: %s", msg)
	w.mu.Lock()
	w.violations = append(w.violations, fmt.Sprintf("%s: %s", time.Since(w.t0), msg))
	w.mu.Unlock()
}

// leaderElected runs as n becomes leader (under the cluster's lock).
func (w *world) leaderElected(n *simNode) {
	w.elections++
	w.mu.Lock()
	w.elected = append(w.elected, time.Now())
	w.mu.Unlock()
	if w.cfg.FastLeader > 0 && w.elections > 1 {
		n.clk.setRate(1 + w.cfg.FastLeader)
	}
}

// stream is a seeded random source of its own for one part of the world,
// so that what one part draws does not depend on when another draws.
func (w *world) stream(name string) *rand.Rand {
	h := fnv.New64a()
	_, _ = h.Write([]byte(name))
	return rand.New(rand.NewPCG(w.seed, h.Sum64()))
}

// Result is what one run found.
type Result struct {
	Seed       uint64
	Violations []string
	Trace      []string
	Grants     int // grants acknowledged to clients
	Elections  int
	Checked    int // the prober's calls checked against the porcupine models
	Unchecked  int // histories whose check ran out of time

	// what the prober recorded, checked after the world (checkModels)
	lin    []e2e.Op
	shared []e2e.SharedOp
	multi  map[int][]e2e.MultiOp
}

// Digest is a hash of the trace: two runs of one seed must agree on it.
func (r Result) Digest() uint64 {
	h := fnv.New64a()
	for _, l := range r.Trace {
		_, _ = h.Write([]byte(l))
		_, _ = h.Write([]byte{'\n'})
	}
	return h.Sum64()
}

// run is the body of one world; it must run inside a synctest bubble
// (RunSeed), whose clock is the world's virtual time.
func run(seed uint64, cfg Config) Result {
	w := &world{seed: seed, cfg: cfg, t0: time.Now(), verbose: cfg.Verbose}
	w.hist = newHistory(w)
	c := &cluster{w: w, rnd: w.stream("raft"), pending: map[uint64]*proposal{}}
	c.audit = w.hist.audit
	w.cl = c
	drift := w.stream("drift")
	scfg := service.Config{
		Logger:       slog.New(slog.DiscardHandler),
		ApplyTimeout: 5 * time.Second, MinTickInterval: 10 * time.Millisecond, ClockCheckpoint: time.Second,
		JoinCatchUp: time.Second, AnnounceEvery: time.Second,
		MaxWaitersPerKey: 1000, MaxWaiters: 100000,
		WatchHistory: 10000, WatchMaxWatchers: 1000, WatchMaxPerCaller: 100,
	}
	for i := range cfg.Nodes {
		n := &simNode{c: c, id: fmt.Sprintf("n%d", i+1), clk: newSimClock(w.t0, clockDrift(drift))}
		c.nodes = append(c.nodes, n)
	}
	// The members table as a cluster's joins leave it: every node's
	// client address known to all, so a follower names any leader.
	for _, n := range c.nodes {
		data, err := fsm.Encode(fsm.Command{Op: fsm.OpMember, NodeID: n.id, RaftAddr: n.id, ClientAddr: n.id + ":7470"})
		if err != nil {
			w.violate("members table: %v", err)
			return w.result()
		}
		c.log = append(c.log, data)
		c.audit(uint64(len(c.log)), data)
	}
	for _, n := range c.nodes {
		if err := n.start(scfg); err != nil {
			w.violate("starting %s: %v", n.id, err)
			return w.result()
		}
	}
	c.mu.Lock()
	c.armLocked()
	c.mu.Unlock()

	var wg sync.WaitGroup
	// The actors, then the prober and the watcher (the nemesis's faults
	// reach them all).
	actors := make([]*actor, cfg.Clients+2)
	for i := range actors {
		actors[i] = newActor(w, i, clockDrift(drift))
	}
	prober, watcher := actors[cfg.Clients], actors[cfg.Clients+1]
	w.probes = &probes{lin: e2e.NewRecorder(), multi: map[int][]e2e.MultiOp{}}
	end := w.t0.Add(cfg.Horizon)
	for _, a := range actors[:cfg.Clients] {
		wg.Add(1)
		go func() { defer wg.Done(); a.run(end) }()
	}
	wg.Add(1)
	go func() { defer wg.Done(); prober.probe(end) }()
	if cfg.Faults {
		m := &nemesis{w: w, rnd: w.stream("nemesis"), actors: actors, scfg: scfg}
		wg.Add(1)
		go func() { defer wg.Done(); m.run(end) }()
	}
	stop, watched := make(chan struct{}), make(chan struct{})
	go func() { defer close(watched); watcher.watch(stop) }()
	wg.Wait()
	close(stop)
	<-watched
	for _, a := range actors {
		a.c.Close()
	}
	for _, n := range c.nodes {
		c.mu.Lock()
		crashed := n.crashed
		n.crashed = true
		if n.frozen() {
			n.clk.resume()
		}
		svc, guard := n.svc, n.guard
		c.mu.Unlock()
		if !crashed {
			svc.BeginShutdown()
			svc.Close()
			guard.Close()
		}
	}
	w.hist.finish()
	return w.result()
}

func (w *world) result() Result {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := Result{Seed: w.seed, Violations: append([]string(nil), w.violations...), Trace: append([]string(nil), w.trace...),
		Grants: w.hist.acked(), Elections: w.elections}
	if p := w.probes; p != nil {
		r.lin, r.shared, r.multi = p.lin.Ops(), p.shared, p.multi
	}
	return r
}

// clockDrift is a clock-rate error within the design's bound: each clock
// off by at most 0.4%, so two differ by at most 0.8%, inside the TTL/100
// the keep-alive keeps for it.
func clockDrift(r *rand.Rand) float64 { return (r.Float64()*2 - 1) * 0.004 }

// sleepCtx waits d of virtual time or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// String is a short summary of a result.
func (r Result) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %d grants, %d elections, %d violations", r.Seed, r.Grants, r.Elections, len(r.Violations))
	for _, v := range r.Violations {
		fmt.Fprintf(&b, "\n  %s", v)
	}
	return b.String()
}
