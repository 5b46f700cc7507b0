package e2e

import (
	"fmt"
	"sync"
	"time"
)

// Kind is what an operation asked for.
type Kind uint8

// The operations of the lock table. PhantomGrant and PhantomRelease are not
// sent to anyone: they stand for what the server may do on its own behalf
// during a waiting acquire (see Recorder.Wait).
const (
	Acquire Kind = iota // try once
	Wait                // acquire that queues for up to a wait
	Extend
	Release
	Check
	Get
	PhantomGrant
	PhantomRelease
)

var kindNames = [...]string{"acquire", "wait", "extend", "release", "check", "get", "phantom-grant", "phantom-release"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", k)
}

// isGrant reports whether k can hand out a token.
func (k Kind) isGrant() bool { return k == Acquire || k == Wait }

// Input is one call.
type Input struct {
	Kind   Kind
	Key    string
	Holder string
	Token  uint64        // extend, release (0: any), check
	TTL    time.Duration // acquire, wait, extend
	// Expires marks a key whose leases may expire within the run: it is
	// left out of the linearizability check (the model has no clock).
	Expires bool
}

// Result is how an operation ended.
type Result uint8

const (
	// Unknown: no definite answer (timeout, unreachable, unavailable); the
	// operation may or may not have taken effect.
	Unknown Result = iota
	// OK: acquire/wait granted, extend extended, release/check answered
	// (Bool), get found a lease (Holder, Token).
	OK
	// Refused: acquire held by another, wait elapsed, extend not_held, get
	// not_found.
	Refused
)

func (r Result) String() string {
	switch r {
	case OK:
		return "ok"
	case Refused:
		return "refused"
	}
	return "unknown"
}

// Output is an answer.
type Output struct {
	Result Result
	Token  uint64 // acquire/wait: the token granted; get: the lease's token
	Holder string // get: the lease's holder
	Bool   bool   // release: released; check: valid
}

// Op is one recorded operation. Call and Return are offsets from the start
// of the recording on the client's monotonic clock; Return is meaningful
// for Unknown outcomes too (when the client gave up), but the checkers
// treat an Unknown operation as possibly taking effect at any time after
// Call.
type Op struct {
	ID     int
	Client int
	Input  Input
	Output Output
	Call   time.Duration
	Return time.Duration
	done   bool
}

func (o Op) String() string {
	in, out := o.Input, o.Output
	s := fmt.Sprintf("#%d c%d [%v..%v] %s %s/%s", o.ID, o.Client, o.Call.Round(time.Millisecond), o.Return.Round(time.Millisecond), in.Kind, in.Key, in.Holder)
	if in.Token != 0 {
		s += fmt.Sprintf(" token=%d", in.Token)
	}
	s += " -> " + out.Result.String()
	switch {
	case out.Result != OK:
	case in.Kind.isGrant():
		s += fmt.Sprintf(" token=%d", out.Token)
	case in.Kind == Get:
		s += fmt.Sprintf(" %s/%d", out.Holder, out.Token)
	case in.Kind == Release || in.Kind == Check:
		s += fmt.Sprintf(" %v", out.Bool)
	}
	return s
}

// Recorder collects a history from many goroutines.
type Recorder struct {
	start time.Time
	mu    sync.Mutex
	ops   []Op
}

// NewRecorder starts a history now.
func NewRecorder() *Recorder { return &Recorder{start: time.Now()} }

// Since is the recording clock: the time since the recording started.
func (r *Recorder) Since() time.Duration { return time.Since(r.start) }

// Start records the invocation of in by client and returns its id for End.
func (r *Recorder) Start(client int, in Input) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	id := len(r.ops)
	r.ops = append(r.ops, Op{ID: id, Client: client, Input: in, Call: time.Since(r.start)})
	return id
}

// End records the answer to operation id.
func (r *Recorder) End(id int, out Output) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.endLocked(id, out, time.Since(r.start))
}

func (r *Recorder) endLocked(id int, out Output, now time.Duration) {
	if id < 0 || id >= len(r.ops) || r.ops[id].done {
		return
	}
	r.ops[id].Output, r.ops[id].Return, r.ops[id].done = out, now, true
}

// Wait records a waiting acquire: its own operation, plus what the server
// may do for a waiting acquire that the client re-sends after a failure
// (a waiting acquire carries no request id the server remembers): grant an
// earlier copy to the same holder, and release such a grant whose waiter
// went away. They are recorded as a phantom grant and a phantom release of
// that holder, concurrent with the wait, which may or may not take effect.
// It returns the id of the wait for End (the phantoms end with it).
func (r *Recorder) Wait(client int, in Input) int {
	in.Kind = Wait
	id := r.Start(client, in)
	g, rel := in, in
	g.Kind, rel.Kind = PhantomGrant, PhantomRelease
	r.Start(client, g)
	r.Start(client, rel)
	return id
}

// EndWait ends a wait started with Wait and its phantoms.
// A granted wait's phantoms carry its token: they happened before it.
func (r *Recorder) EndWait(id int, out Output) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Since(r.start)
	r.endLocked(id, out, now)
	for _, p := range []int{id + 1, id + 2} {
		if p < len(r.ops) && !r.ops[p].done {
			if out.Result == OK {
				r.ops[p].Input.Token = out.Token
			}
			r.endLocked(p, Output{}, now)
		}
	}
}

// Ops returns a copy of the history. Operations not yet ended are Unknown,
// answered now.
func (r *Recorder) Ops() []Op {
	now := time.Since(r.start)
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Op, len(r.ops))
	copy(out, r.ops)
	for i := range out {
		if !out[i].done {
			out[i].Output, out[i].Return, out[i].done = Output{}, now, true
		}
	}
	return out
}
