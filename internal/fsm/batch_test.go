package fsm

import (
	"bytes"
	"math/rand/v2"
	"reflect"
	"strconv"
	"testing"

	"github.com/fencelock/fencelock/internal/locktable"
)

// batchLogs is a log with every kind of entry an engine hands the FSM:
// grants, refusals, a queue and its hand-off, retries under a request id
// (answered from memory), expiries, sessions, shared locks, an entry that
// does not decode, and entries with no command (an engine's own).
func batchLogs(t *testing.T) []Entry {
	t.Helper()
	var logs []Entry
	add := func(data []byte) {
		logs = append(logs, Entry{Index: uint64(len(logs) + 1), Term: 1, Data: data})
	}
	cmd := func(c Command) {
		d, err := Encode(c)
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		add(d)
	}
	add(nil)
	cmd(Command{Op: OpClusterID, ClusterID: "c1"})
	cmd(Command{Op: OpMember, NodeID: "n1", RaftAddr: "a", ClientAddr: "b"})
	for i := 0; i < 40; i++ {
		now := locktable.Time(i) * tsec
		k := "k" + strconv.Itoa(i%5)
		h := "h" + strconv.Itoa(i%3)
		acq := Command{Op: OpAcquire, Now: now, Key: k, Holder: h, TTL: 3 * sec, RequestID: "a" + strconv.Itoa(i%7)}
		cmd(acq)
		if i%5 == 1 {
			cmd(acq) // a retry
		}
		cmd(Command{Op: OpWait, Now: now, Key: k, Holder: h + "w", TTL: 2 * sec, Deadline: now + 5*tsec, RequestID: "w" + strconv.Itoa(i)})
		cmd(Command{Op: OpExtend, Now: now, Key: k, Holder: h, Token: uint64(i), TTL: 4 * sec})
		if i%4 == 0 {
			cmd(Command{Op: OpRelease, Now: now, Key: k, Holder: h, RequestID: "r" + strconv.Itoa(i%3)})
		}
		if i%6 == 0 {
			cmd(Command{Op: OpTick, Now: now})
			add([]byte{byte(OpAcquire), 9}) // does not decode
		}
		if i%9 == 0 {
			cmd(Command{Op: OpSessionOpen, Now: now, Holder: "s" + h, TTL: 5 * sec})
			cmd(Command{Op: OpAcquireKeys, Now: now, Holder: "s" + h, Session: uint64(i/9 + 1), Items: []Item{{Key: "m" + k}, {Key: "n" + k}}})
			cmd(Command{Op: OpShared, Now: now, Key: "sem", Holder: h, TTL: 2 * sec, Shared: sem3})
			cmd(Command{Op: OpExtendBatch, Now: now, Holder: h, TTL: sec, Items: []Item{{Key: k, Token: 1}, {Key: "k0", Token: uint64(i)}}})
			add(nil)
		}
		if i%10 == 0 {
			cmd(Command{Op: OpCancelWaits, Now: now, Items: []Item{{Key: k, Holder: h + "w"}}})
		}
	}
	return logs
}

// applyOneByOne applies logs one entry at a time with Apply: the state
// machine, its events, its answers and its state after them, for a
// batched run to be held to.
func applyOneByOne(logs []Entry) (*FSM, *recorder, []Result, []byte) {
	rec := &recorder{}
	one := New(rec.observe)
	var want []Result
	for _, l := range logs {
		want = append(want, *one.Apply(l.Index, l.Term, l.Data))
	}
	state, _ := one.MarshalBinary()
	return one, rec, want, state
}

// ApplyBatch, in batches of any size, answers every entry and leaves the
// state exactly as Apply of one entry at a time does, with the same events
// at the same indexes. An entry with no command is answered with its index
// alone.
func TestApplyBatchIsApply(t *testing.T) {
	logs := batchLogs(t)
	one, oneRec, want, wantState := applyOneByOne(logs)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, size := range []int{1, 2, 7, 64, len(logs), 0} {
		rec := &recorder{}
		f := New(rec.observe)
		var got []Result
		for rest := logs; len(rest) > 0; {
			n := size
			if n == 0 {
				n = 1 + rng.IntN(64) // raft's batches vary
			}
			n = min(n, len(rest))
			res := f.ApplyBatch(rest[:n], nil)
			if len(res) != n {
				t.Fatalf("size %d: %d answers to %d entries", size, len(res), n)
			}
			got = append(got, res...)
			rest = rest[n:]
		}
		for i := range logs {
			if !reflect.DeepEqual(want[i], got[i]) {
				t.Fatalf("size %d: entry %d (%d bytes) answered\n%#v\nwant\n%#v", size, i+1, len(logs[i].Data), got[i], want[i])
			}
		}
		if !reflect.DeepEqual(rec.evs, oneRec.evs) {
			t.Fatalf("size %d: events differ:\n%v\nwant\n%v", size, rec.evs, oneRec.evs)
		}
		if st, _ := f.MarshalBinary(); !bytes.Equal(st, wantState) {
			t.Fatalf("size %d: state differs", size)
		}
		if f.AppliedIndex() != one.AppliedIndex() || f.Now() != one.Now() {
			t.Fatalf("size %d: applied %d at %d, want %d at %d", size, f.AppliedIndex(), f.Now(), one.AppliedIndex(), one.Now())
		}
	}
	// The script exercises what it claims to.
	var granted, dup, bad, refused, handoff, none int
	for i, r := range want {
		switch {
		case len(logs[i].Data) == 0:
			none++
		case r.Duplicate:
			dup++
		case r.Err != nil && r.Op == 0:
			bad++
		case r.Err != nil:
			refused++
		case r.Granted:
			granted++
		}
	}
	for _, e := range oneRec.evs {
		if e.ev.Kind == locktable.EventGranted && e.ev.Since < e.ev.At {
			handoff++
		}
	}
	if granted == 0 || dup == 0 || bad == 0 || refused == 0 || handoff == 0 || none == 0 {
		t.Fatalf("granted %d, duplicates %d, bad %d, refused %d, hand-offs %d, no command %d: the script misses a case",
			granted, dup, bad, refused, handoff, none)
	}
}

// A restart's replay (entries marked Unanswered) changes the state, the
// events and the request-id memory exactly as answered entries do, but
// ApplyBatch keeps no Result for it: a batch of replayed entries is
// answered nil, and in a batch that mixes both kinds the answered entries
// get the Results Apply gives. Retries of replayed requests are then
// answered from memory.
func TestReplayedEntriesAreUnanswered(t *testing.T) {
	logs := batchLogs(t)
	_, oneRec, want, wantState := applyOneByOne(logs)
	rng := rand.New(rand.NewPCG(3, 4))
	for _, replayed := range []int{0, 1, 63, len(logs) / 2, len(logs) - 1, len(logs)} {
		ents := append([]Entry(nil), logs...)
		for i := range ents[:replayed] {
			ents[i].Unanswered = true
		}
		rec := &recorder{}
		f := New(rec.observe)
		for i := 0; i < len(ents); {
			n := min(1+rng.IntN(64), len(ents)-i)
			batch := ents[i : i+n]
			res := f.ApplyBatch(batch, nil)
			switch {
			case batch[n-1].Unanswered && res != nil:
				t.Fatalf("replayed %d: a batch of replayed entries %d..%d answered", replayed, i+1, i+n)
			case !batch[n-1].Unanswered && len(res) != n:
				t.Fatalf("replayed %d: %d answers to %d entries", replayed, len(res), n)
			}
			for j := range res {
				if !batch[j].Unanswered && !reflect.DeepEqual(res[j], want[i+j]) {
					t.Fatalf("replayed %d: entry %d answered\n%#v\nwant\n%#v", replayed, i+j+1, res[j], want[i+j])
				}
			}
			i += n
		}
		if !reflect.DeepEqual(rec.evs, oneRec.evs) {
			t.Fatalf("replayed %d: events differ", replayed)
		}
		if st, _ := f.MarshalBinary(); !bytes.Equal(st, wantState) {
			t.Fatalf("replayed %d: state differs", replayed)
		}
	}

	// A retry of a replayed request is answered from memory.
	f := New(nil)
	acq := Command{Op: OpAcquire, Now: tsec, Key: "k", Holder: "h", TTL: 3 * sec, RequestID: "r1"}
	d, err := Encode(acq)
	if err != nil {
		t.Fatal(err)
	}
	if res := f.ApplyBatch([]Entry{{Index: 1, Term: 1, Data: d, Unanswered: true}}, nil); res != nil {
		t.Fatalf("a replayed acquire answered %+v", res)
	}
	res := f.ApplyBatch([]Entry{{Index: 2, Term: 2, Data: d}}, nil)
	if len(res) != 1 || !res[0].Duplicate || !res[0].Granted || res[0].Lease.Token != 1 || f.LastToken() != 1 {
		t.Fatalf("the retry after the replay answered %+v, last token %d", res, f.LastToken())
	}
}
