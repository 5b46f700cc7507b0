package sim

import (
	"cmp"
	"container/heap"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing/synctest"
	"time"

	"github.com/fencelock/fencelock/internal/e2e"
	"github.com/fencelock/fencelock/internal/sim/simcheck"
	"github.com/fencelock/fencelock/internal/sim/simclock"
	"github.com/fencelock/fencelock/internal/sim/simrand"
)

// Config is one world's shape.
type Config struct {
	Nodes   int           // voters (3)
	Clients int           // client processes, each running one actor
	Horizon time.Duration // virtual time the actors start work for
	Faults  bool          // run the nemeses
	// Nemeses is how many nemeses inject faults, each one at a time: with
	// two, their faults overlap.
	Nemeses int
	// FastLeader plants a fault beyond the design's bound: every leader
	// elected after the first runs its clock this much fast (0.25: 25%).
	FastLeader float64
	// Verbose traces every event of the committed log too; Debug,
	// every request too.
	Verbose, Debug bool

	// SyncForget: a failed sync drops what it was to write, as Linux's
	// does (disk.Faults.SyncForget); see RELIABILITY.md for what the
	// node makes of it.
	SyncForget bool

	// Focus weighs the nemesis toward one kind of fault ("": the mix).
	Focus string

	// TTLs are the leases' the actors take, one drawn for each.
	TTLs []time.Duration
	// Shaped: each seed draws its own shape (shape): the nodes (1, 3 or
	// 5), the clients, the TTLs, the snapshot threshold and interval, the
	// log kept behind a snapshot, the log's segment size.
	Shaped bool

	// ACL: the cluster's ACLs are on, each client process with a token
	// and a policy of its own, which the nemesis deletes and takes away
	// (acl.go). A quarter of the shaped worlds draw it.
	ACL bool

	// Quotas: the nodes run with small per-principal quotas, held to
	// them by checks of their own (quota.go). Half of the worlds with
	// ACLs draw them (quotas count principals).
	Quotas bool

	// Stream: the watcher watches over the event stream (server-sent
	// events, stream.go), not client.Watch's long-polls. Half of the
	// shaped worlds draw it.
	Stream bool

	// Flips: a third of the restarts read a flipped bit now and then
	// (disk.Faults.Flip).
	Flips bool

	// Writes is how the engine writes its log: "async" (with
	// node.Config.AsyncLogWrites: the world's disk takes each write
	// after a delay of its own while raft runs on), "draw" for each seed
	// to draw one, else sync, as the product runs by default.
	Writes string

	// The engine's settings.
	SnapshotThreshold uint64
	TrailingLogs      uint64
	SnapshotEvery     time.Duration // how often a node checks the threshold
	SegmentSize       int           // raft-wal's segments
}

// DefaultConfig is the world `go test ./internal/sim` runs.
func DefaultConfig() Config {
	return Config{Nodes: 3, Clients: 4, Horizon: 20 * time.Second, Faults: true, Nemeses: 1, Shaped: true, Flips: true,
		TTLs:              []time.Duration{1500 * time.Millisecond, 3 * time.Second, 6 * time.Second},
		SnapshotThreshold: 200, TrailingLogs: 50, SnapshotEvery: 2 * time.Second, SegmentSize: 64 << 10}
}

// shape is cfg with the shape seed draws for itself (Config.Shaped).
func (cfg Config) shape(w *world) Config {
	if !cfg.Shaped {
		return cfg
	}
	r := w.draw("shape", 0)
	pick := func(xs ...int) int { return xs[r.IntN(len(xs))] }
	cfg.Nodes = pick(1, 3, 3, 3, 3, 5, 5)
	cfg.Clients = pick(3, 4, 4, 5)
	ttlSets := [][]time.Duration{
		{1500 * time.Millisecond, 3 * time.Second, 6 * time.Second},
		{2 * time.Second, 4 * time.Second},
		{3 * time.Second, 10 * time.Second},
		{1500 * time.Millisecond},
	}
	cfg.TTLs = ttlSets[r.IntN(len(ttlSets))]
	cfg.SnapshotThreshold = uint64(pick(20, 200, 200, 2000))
	cfg.TrailingLogs = uint64(pick(5, 50))
	cfg.SnapshotEvery = time.Duration(pick(1, 2, 5)) * time.Second
	cfg.SegmentSize = pick(8<<10, 64<<10)
	if cfg.Focus == "" {
		cfg.Nemeses = pick(1, 2)
	}
	// A draw of its own, so that the other draws stay what they were.
	cfg.ACL = cfg.ACL || w.draw("acl", 0).IntN(4) == 0
	cfg.Quotas = cfg.Quotas || cfg.ACL && w.draw("quota", 0).IntN(2) == 0
	cfg.Stream = cfg.Stream || w.draw("stream", 0).IntN(2) == 0
	return cfg
}

// async says whether the engine writes its log asynchronously
// (Config.Writes; a draw of its own, so that the shape's stay as they
// were).
func (cfg Config) async(w *world) bool {
	switch cfg.Writes {
	case "async":
		return true
	case "draw":
		return w.draw("writes", 0).IntN(2) == 1
	}
	return false // what the product runs unless told
}

// The raft timing of the server's defaults: an election timeout of
// 500 ms is ten ticks of 50 ms; a follower calls a leader silent after a
// heartbeat timeout of 500 ms.
const (
	electionTimeout  = 500 * time.Millisecond
	heartbeatTimeout = 500 * time.Millisecond
	tickEvery        = electionTimeout / 10
)

// world is one seeded run. Its nodes' raft, storage and disks move only
// in its event loop (loop), one event at a time, each after everything
// else in the world has settled: so no order in the world is decided by
// which goroutine the scheduler runs first. The service, the API and the
// clients are goroutines, as they are in production; they run between
// events, one wake-up at a time (settle).
type world struct {
	seed    uint64
	cfg     Config
	t0      time.Time
	verbose bool
	debug   bool
	async   bool // the engine writes its log asynchronously (Config.Writes)

	// the event loop's own
	q      eventQueue
	nseq   uint64
	wakes  []func()
	dues   *simclock.Dues // the instants the processes' timers fall due at
	kick   chan struct{}  // a goroutine asked a node something
	done   chan struct{}  // closed when the world is over
	ending bool           // the loop has stopped: wake-ups run at once
	inbox  []func()       // what other goroutines hand the loop (under mu)
	ops    sync.WaitGroup // operators' calls under way

	mu         sync.Mutex
	trace      []traceLine
	tseq       map[string]int
	instants   *simrand.Instants // draws keyed by the virtual instant too
	violations []string
	elections  int
	elected    []time.Time         // when each leader was elected
	faults     []simcheck.Fault    // every fault, once healed
	outages    []simcheck.Interval // when no majority of the nodes worked together
	counts     faultCounts
	cl         *cluster
	hist       *simcheck.History
	losses     []simcheck.Loss // leases their holders found lost, judged at the end (judgeLosses)
	probes     *probes

	aclReady chan struct{}       // with ACLs: closed once every client has its token
	acl      *simcheck.ACL       // with ACLs: the changes that took something from a client (acl.go)
	quota    *simcheck.QuotaBook // with quotas: the calls they are judged on (quota.go)
}

// traceLine is one line of the trace: sorted by virtual time, then its
// source, then its text, the trace is a function of the seed even where
// two goroutines of one source write at one instant.
type traceLine struct {
	at   time.Duration
	src  string
	seq  int
	text string
}

func (l traceLine) String() string { return fmt.Sprintf("%12s %s", l.at, l.text) }

// tracef records a line from src: "w" for the world's loop, "cN" for
// client process N, "z" for the checks after the world.
func (w *world) tracef(src, format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.tseq[src]++
	w.trace = append(w.trace, traceLine{at: time.Since(w.t0), src: src, seq: w.tseq[src], text: fmt.Sprintf(format, args...)})
}

// checks is the world as the checks report to it.
type checks struct{ w *world }

func (c checks) Tracef(src, format string, args ...any)  { c.w.tracef(src, format, args...) }
func (c checks) Violate(src, format string, args ...any) { c.w.violate(src, format, args...) }

func (w *world) violate(src, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	w.tracef(src, "VIOLATION: %s", msg)
	w.mu.Lock()
	w.violations = append(w.violations, fmt.Sprintf("%s: %s", time.Since(w.t0), msg))
	w.mu.Unlock()
}

// draw is a random stream for one decision of the world (simrand.Draw).
func (w *world) draw(key string, n uint64) *rand.Rand { return simrand.Draw(w.seed, key, n) }

// stream is a seeded random source of its own for one part of the world
// that draws in an order of its own (simrand.Stream).
func (w *world) stream(name string) *rand.Rand { return simrand.Stream(w.seed, name) }

// event is something the loop does at a virtual instant; events of one
// instant run in the order they were scheduled (the loop schedules them
// all, so that order is the seed's).
type event struct {
	at  time.Time
	seq uint64
	run func()
}

type eventQueue []*event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if c := q[i].at.Compare(q[j].at); c != 0 {
		return c < 0
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// at schedules f d from now (the loop's own).
func (w *world) at(d time.Duration, f func()) {
	w.nseq++
	heap.Push(&w.q, &event{at: time.Now().Add(max(d, 0)), seq: w.nseq, run: f})
}

// post queues a wake-up of a goroutine waiting on a node: the loop runs
// them one at a time, each after the world has settled.
func (w *world) post(f func()) {
	if w.ending {
		f()
		return
	}
	w.wakes = append(w.wakes, f)
}

// kickLoop wakes the loop: a goroutine is about to ask a node something
// (the loop settles before it looks).
func (w *world) kickLoop() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// hand gives the loop f to run (from another goroutine: an operator's
// call that changed the configuration).
func (w *world) hand(f func()) {
	w.mu.Lock()
	w.inbox = append(w.inbox, f)
	w.mu.Unlock()
	w.kickLoop()
}

// runInbox runs what other goroutines handed the loop; false when
// nothing was.
func (w *world) runInbox() bool {
	w.mu.Lock()
	in := w.inbox
	w.inbox = nil
	w.mu.Unlock()
	for _, f := range in {
		f()
	}
	return len(in) > 0
}

// settle runs the queued wake-ups one at a time, letting the world
// settle before and after each.
func (w *world) settle() {
	for {
		synctest.Wait()
		if len(w.wakes) == 0 {
			return
		}
		f := w.wakes[0]
		w.wakes = w.wakes[1:]
		f()
	}
}

// loop runs the world's events until done is closed.
func (w *world) loop() {
	for {
		w.settle()
		select {
		case <-w.done:
			return
		default:
		}
		if w.runInbox() || w.cl.runPending() {
			continue
		}
		if len(w.q) > 0 && !w.q[0].at.After(time.Now()) {
			heap.Pop(&w.q).(*event).run()
			continue
		}
		var t *time.Timer
		var due <-chan time.Time
		if len(w.q) > 0 {
			t = time.NewTimer(time.Until(w.q[0].at))
			due = t.C
		}
		select {
		case <-due:
		case <-w.kick:
		case <-w.done:
		}
		if t != nil {
			t.Stop()
		}
	}
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
	Faults     faultCounts

	// what the prober recorded, checked after the world (checkModels)
	calls simcheck.Calls
}

// checkModels checks what the prober recorded against the porcupine
// models (simcheck.Models).
func (r *Result) checkModels() {
	v := simcheck.Models(r.calls)
	r.Violations = append(r.Violations, v.Violations...)
	r.Checked += v.Checked
	r.Unchecked += v.Unchecked
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
// (runSeed), whose clock is the world's virtual time.
func run(seed uint64, cfg Config) Result {
	w := &world{seed: seed, cfg: cfg, t0: time.Now(), verbose: cfg.Verbose, debug: cfg.Debug, kick: make(chan struct{}, 1),
		done: make(chan struct{}), tseq: map[string]int{}, instants: simrand.NewInstants(seed), dues: simclock.NewDues()}
	w.cfg = cfg.shape(w)
	cfg = w.cfg
	w.hist = simcheck.NewHistory(checks{w}, w.t0, w.verbose)
	w.cl = newCluster(w)
	w.async = cfg.async(w)
	if cfg.Quotas && cfg.ACL {
		w.setQuotas()
	}
	w.tracef("w", "world: %d nodes, %d clients, TTLs %v, snapshots every %d entries (checked every %s, %d kept behind), segments of %d bytes, %d nemeses, async writes %v%s%s",
		cfg.Nodes, cfg.Clients, cfg.TTLs, cfg.SnapshotThreshold, cfg.SnapshotEvery, cfg.TrailingLogs, cfg.SegmentSize, cfg.Nemeses, w.async,
		map[bool]string{true: ", ACLs on"}[cfg.ACL], map[bool]string{true: ", watched over the event stream"}[cfg.Stream])
	w.cl.boot()

	var wg sync.WaitGroup
	// The actors, then the prober and the watcher (the nemesis's faults
	// reach them all).
	actors := make([]*actor, cfg.Clients+2)
	drift := w.stream("drift")
	for i := range actors {
		actors[i] = newActor(w, i, clockDrift(drift))
	}
	prober, watcher := actors[cfg.Clients], actors[cfg.Clients+1]
	w.probes = &probes{lin: e2e.NewRecorder(), multi: map[int][]e2e.MultiOp{}, sess: map[int][]simcheck.SessionOp{}}
	end := w.t0.Add(cfg.Horizon)
	if cfg.ACL {
		w.aclReady = make(chan struct{})
		w.acl = simcheck.NewACL(checks{w}, w.t0)
		w.ops.Add(1)
		go w.bootACL(actors, cfg.Clients)
	}
	for _, a := range actors[:cfg.Clients] {
		wg.Add(1)
		go func() { defer wg.Done(); w.aclWait(); a.run(end) }()
	}
	wg.Add(1)
	go func() { defer wg.Done(); w.aclWait(); prober.probe(end) }()
	if cfg.Faults {
		for i := range cfg.Nemeses {
			m := &nemesis{w: w, actors: actors, chain: i}
			w.at(m.pause(0), func() { m.next(end) })
		}
	}
	stop, watched := make(chan struct{}), make(chan struct{})
	go func() { defer close(watched); w.aclWait(); watcher.watch(stop) }()
	go func() {
		wg.Wait()
		close(stop)
		<-watched
		w.ops.Wait() // (none starts after the horizon)
		close(w.done)
	}()
	w.loop()
	w.ending = true
	for _, a := range actors {
		a.c.Close()
	}
	w.cl.shutdown()
	w.judgeLosses()
	w.hist.Finish()
	w.judgeQuotas()
	return w.result()
}

func (w *world) result() Result {
	w.mu.Lock()
	defer w.mu.Unlock()
	lines := slices.Clone(w.trace)
	slices.SortStableFunc(lines, func(a, b traceLine) int {
		return cmp.Or(cmp.Compare(a.at, b.at), strings.Compare(a.src, b.src), strings.Compare(a.text, b.text))
	})
	r := Result{Seed: w.seed, Violations: slices.Clone(w.violations), Grants: w.hist.Acked(), Elections: w.elections,
		Faults: w.counts}
	for _, l := range lines {
		r.Trace = append(r.Trace, l.String())
	}
	if p := w.probes; p != nil {
		r.calls = simcheck.Calls{Lin: p.lin.Ops(), Shared: p.shared, Multi: p.multi, Sessions: p.sess}
	}
	return r
}

// clockDrift is a clock-rate error within the design's bound: each clock
// off by at most 0.4%, so two differ by at most 0.8%, inside the TTL/100
// the keep-alive keeps for it.
func clockDrift(r *rand.Rand) float64 { return (r.Float64()*2 - 1) * 0.004 }

// String is a short summary of a result.
func (r Result) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %d grants, %d elections, %d violations", r.Seed, r.Grants, r.Elections, len(r.Violations))
	for _, v := range r.Violations {
		fmt.Fprintf(&b, "\n  %s", v)
	}
	return b.String()
}
