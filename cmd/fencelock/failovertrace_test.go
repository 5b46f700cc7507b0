//go:build linux

package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fencelock/fencelock/internal/framing"
)

// Where a worst-phase failover's time goes: the survivors' raft and
// service lines (their logs, at info) and the client's extensions as
// the proxies see them, laid on one time line from the fault. A lost
// lease prints its time line; FENCELOCK_WORST_PHASE_TRACE=1 prints every
// run's, and the summary gives each phase's spread.

// wireTrace records the extensions that cross the proxies and the
// status of their answers.
type wireTrace struct {
	mu     sync.Mutex
	events []traceEvent
}

type traceEvent struct {
	at   time.Time
	node string
	what string
}

func (w *wireTrace) add(node, what string) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.events = append(w.events, traceEvent{at: time.Now(), node: node, what: what})
}

// between is what was recorded in [from, to].
func (w *wireTrace) between(from, to time.Time) []traceEvent {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []traceEvent
	for _, e := range w.events {
		if !e.at.Before(from) && !e.at.After(to) {
			out = append(out, e)
		}
	}
	return out
}

// connTrace follows one proxied connection of the client's framed
// protocol (internal/framing: a preface each way, then length-prefixed
// frames) and ties each answer to its extension by the request's id.
type connTrace struct {
	mu      sync.Mutex
	in, out []byte          // bytes of a frame not yet whole, client to node and back
	skipIn  int             // preface bytes still to pass over, each way
	skipOut int             //
	extends map[uint32]bool // ids of the extensions out
	off     bool            // a frame not understood
	// http: the connection speaks HTTP/1.1 (a client without frames, or
	// a node asking another); httpOut counts its extensions not yet
	// answered, which come back in order.
	http    bool
	httpOut []uint32
	httpSeq uint32
}

func newConnTrace() *connTrace {
	return &connTrace{skipIn: len(framing.Preface), skipOut: len(framing.Preface), extends: map[uint32]bool{}}
}

// seenHTTP is seen for a connection in HTTP/1.1: a request's head
// starts a chunk (its body may follow in the next), and so does an
// answer's status line.
func (ct *connTrace) seenHTTP(w *wireTrace, node string, b []byte, fromClient bool) {
	if fromClient {
		if bytes.HasPrefix(b, []byte("POST /v1/extend ")) {
			ct.httpSeq++
			ct.httpOut = append(ct.httpOut, ct.httpSeq)
			w.add(node, fmt.Sprintf("extend h%d sent (HTTP)", ct.httpSeq))
		}
		return
	}
	if !bytes.HasPrefix(b, []byte("HTTP/1.1 ")) || len(ct.httpOut) == 0 {
		return
	}
	id := ct.httpOut[0]
	ct.httpOut = ct.httpOut[1:]
	status, _, _ := bytes.Cut(b[len("HTTP/1.1 "):], []byte(" "))
	what := fmt.Sprintf("extend h%d answered %s", id, status)
	if m := answerCode.FindSubmatch(b); m != nil {
		what += " " + string(m[1])
	}
	if m := answerLeader.FindSubmatch(b); m != nil {
		what += " leader=" + string(m[1])
	}
	w.add(node, what)
}

var (
	answerCode   = regexp.MustCompile(`"code":"([a-z_]+)"`)
	answerLeader = regexp.MustCompile(`"leader":"([^"]*)"`)
)

// seen takes in one chunk of a proxied connection and records the
// extensions sent and their answers.
func (ct *connTrace) seen(w *wireTrace, node string, b []byte, fromClient bool) {
	if w == nil {
		return
	}
	ct.mu.Lock()
	defer ct.mu.Unlock()
	if fromClient && ct.skipIn == len(framing.Preface) && len(b) > 0 && b[0] != framing.Preface[0] {
		ct.http = true
		ct.skipIn, ct.skipOut = 0, 0
	}
	if ct.http {
		ct.seenHTTP(w, node, b, fromClient)
		return
	}
	if ct.off {
		return
	}
	buf, skip := &ct.out, &ct.skipOut
	if fromClient {
		buf, skip = &ct.in, &ct.skipIn
	}
	if n := min(*skip, len(b)); n > 0 {
		b, *skip = b[n:], *skip-n
	}
	*buf = append(*buf, b...)
	for len(*buf) >= 4 {
		n := int(binary.BigEndian.Uint32(*buf))
		if n > framing.MaxFrame {
			ct.off = true
			return
		}
		if len(*buf) < 4+n {
			return
		}
		f := (*buf)[4 : 4+n]
		*buf = (*buf)[4+n:]
		if fromClient && len(f) >= 8 {
			id, tlen := binary.BigEndian.Uint32(f), int(binary.BigEndian.Uint16(f[6:]))
			if f[4] == framing.KindRequest && len(f) >= 8+tlen && strings.HasPrefix(string(f[8:8+tlen]), "/v1/extend") {
				ct.extends[id] = true
				w.add(node, fmt.Sprintf("extend #%d sent", id))
			}
		}
		if !fromClient && len(f) >= 6 {
			id, status := binary.BigEndian.Uint32(f), binary.BigEndian.Uint16(f[4:])
			if !ct.extends[id] {
				continue
			}
			delete(ct.extends, id)
			what := fmt.Sprintf("extend #%d answered %d", id, status)
			if m := answerCode.FindSubmatch(f[6:]); m != nil {
				what += " " + string(m[1])
			}
			if m := answerLeader.FindSubmatch(f[6:]); m != nil {
				what += " leader=" + string(m[1])
			}
			w.add(node, what)
		}
	}
}

// failoverMarks are the log lines that mark a failover's steps, each with
// the steps it marks: either engine's raft, and the service. A "round" is
// one election round (pre-vote, then vote) started by a survivor.
var failoverMarks = []struct {
	msg   string
	marks []string
}{
	{"heartbeat timeout reached", []string{"detect"}},                // hashicorp: a follower gave up on its leader
	{"entering candidate state", []string{"round"}},                  // hashicorp
	{"became pre-candidate", []string{"detect", "round"}},            // etcd
	{"rejecting pre-vote request", []string{"refused"}},              // hashicorp: the voter still has a leader, or a newer log
	{"rejecting vote request", []string{"refused"}},                  // hashicorp
	{"pre-vote campaign failed", []string{"refused"}},                // hashicorp
	{"ignored MsgPreVote", []string{"refused"}},                      // etcd: the voter's leader lease has not expired
	{"rejected MsgPreVote", []string{"refused"}},                     // etcd
	{"rejected MsgVote", []string{"refused"}},                        // etcd
	{"failed to make", []string{"rpc failed"}},                       // hashicorp: a vote's RPC went unanswered
	{"election won", []string{"elected"}},                            // hashicorp
	{"became leader at term", []string{"elected"}},                   // etcd
	{"msg=\"became leader\"", []string{"service leader"}},            // the service saw the leadership
	{"msg=ready", []string{"ready"}},                                 // the service serves
	{"msg=\"lost leadership\"", []string{"service lost leadership"}}, // the service
}

var logTime = regexp.MustCompile(`^time=(\S+) `)

// logMarks are node's failover lines in stderr within [from, to].
func logMarks(node, stderr string, from, to time.Time) []traceEvent {
	var out []traceEvent
	sc := bufio.NewScanner(strings.NewReader(stderr))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		m := logTime.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil || at.Before(from) || at.After(to) {
			continue
		}
		if os.Getenv("FENCELOCK_WORST_PHASE_TRACE") == "all" {
			if _, rest, ok := strings.Cut(line, " msg="); ok {
				out = append(out, traceEvent{at: at, node: node, what: rest})
			}
			continue
		}
		for _, fm := range failoverMarks {
			if strings.Contains(line, fm.msg) {
				for _, mark := range fm.marks {
					out = append(out, traceEvent{at: at, node: node, what: mark})
				}
				break
			}
		}
	}
	return out
}

// failoverPhases is one failover's steps, each from the fault (zero:
// not seen).
type failoverPhases struct {
	detect, elected, ready, confirmed time.Duration
	candidacies                       int // election rounds started on the survivors
	refusals                          int // votes refused because the voter still had a leader
	attempts                          int // extensions sent between the fault and the confirmation
}

// phasesOf reads the steps off a time line from the fault at.
func phasesOf(at time.Time, events []traceEvent, confirmedSend time.Time) failoverPhases {
	var p failoverPhases
	first := func(d *time.Duration, e traceEvent) {
		if *d == 0 {
			*d = e.at.Sub(at)
		}
	}
	for _, e := range events {
		switch e.what {
		case "detect":
			first(&p.detect, e)
		case "round":
			p.candidacies++
		case "refused":
			p.refusals++
		case "elected":
			first(&p.elected, e)
		case "ready":
			first(&p.ready, e)
		default:
			if strings.HasPrefix(e.what, "extend ") && strings.Contains(e.what, " sent") {
				p.attempts++
			}
		}
	}
	if !confirmedSend.IsZero() {
		p.confirmed = confirmedSend.Sub(at)
	}
	return p
}

// timeline is events as lines relative to at.
func timeline(at time.Time, events []traceEvent) string {
	slices.SortStableFunc(events, func(a, b traceEvent) int { return a.at.Compare(b.at) })
	var b strings.Builder
	for _, e := range events {
		fmt.Fprintf(&b, "  %+8.3fs %-3s %s\n", e.at.Sub(at).Seconds(), e.node, e.what)
	}
	return b.String()
}

// phaseSpread summarizes the phases of runs: min / median / max of each
// step from the fault, and how many runs started one election round on
// the survivors, two, or more (on hashicorp the first survivor's round is
// refused by design, see internal/node/hashicorp/failover.go: two is its
// one election).
func phaseSpread(ps []failoverPhases) string {
	if len(ps) == 0 {
		return "-"
	}
	mm := func(get func(failoverPhases) time.Duration) string {
		var d []time.Duration
		for _, p := range ps {
			if v := get(p); v != 0 {
				d = append(d, v)
			}
		}
		if len(d) == 0 {
			return "-"
		}
		slices.Sort(d)
		r := func(v time.Duration) string { return v.Round(time.Millisecond).String() }
		return r(d[0]) + " / " + r(d[len(d)/2]) + " / " + r(d[len(d)-1])
	}
	rounds := map[int]int{}
	for _, p := range ps {
		rounds[min(p.candidacies, 3)]++
	}
	return fmt.Sprintf("detect %s | elected %s | ready %s | confirmed send %s | election rounds 1/2/3+: %d/%d/%d",
		mm(func(p failoverPhases) time.Duration { return p.detect }),
		mm(func(p failoverPhases) time.Duration { return p.elected }),
		mm(func(p failoverPhases) time.Duration { return p.ready }),
		mm(func(p failoverPhases) time.Duration { return p.confirmed }), rounds[1], rounds[2], rounds[3])
}
