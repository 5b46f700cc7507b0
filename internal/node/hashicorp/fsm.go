package hashicorp

import (
	"io"

	"github.com/hashicorp/raft"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/node"
)

// raftFSM is the Machine as hashicorp/raft drives it: a batching FSM
// whose command entries become fsm.Entry values. raft hands a batch its
// configuration entries too, and answers their futures itself: they are
// answered nil and never reach the state machine.
//
// The commands a restart replays are applied Unanswered, and answered
// nil: those at or below old, the log's last command when the node
// opened it (lastCommand), of a term no later than that command's. No
// future of this process waits for one: raft gives a future only to an
// entry its leader appends, in a term it was elected in after the node
// opened, which is later than every term its log held then. (The index
// alone would not do: a follower's unreplicated tail can be replaced by
// a later leader's entries, and this node may be that leader.)
type raftFSM struct {
	m   *node.Machine
	old raftPos // zero: none
	// ents, when not nil, is reused for each batch's entries: raft
	// calls ApplyBatch from one goroutine.
	ents *[]fsm.Entry
}

// raftPos is a log entry's position.
type raftPos struct{ index, term uint64 }

var (
	_ raft.FSM         = raftFSM{}
	_ raft.BatchingFSM = raftFSM{}
)

// Apply applies one entry (raft calls ApplyBatch; this is for raft's FSM
// interface).
func (a raftFSM) Apply(l *raft.Log) any { return a.ApplyBatch([]*raft.Log{l})[0] }

// ApplyBatch applies the batch's command entries in one Machine batch.
func (a raftFSM) ApplyBatch(logs []*raft.Log) []any {
	out := make([]any, len(logs))
	var ents []fsm.Entry
	if a.ents != nil {
		ents = (*a.ents)[:0]
		defer func() {
			clear(ents) // holds no entry's data past the batch
			*a.ents = ents[:0]
		}()
	}
	for _, l := range logs {
		if l.Type == raft.LogCommand {
			old := l.Index <= a.old.index && l.Term <= a.old.term
			ents = append(ents, fsm.Entry{Index: l.Index, Term: l.Term, Data: l.Data, Unanswered: old})
		}
	}
	if len(ents) == 0 {
		return out
	}
	res := a.m.ApplyBatch(ents)
	if res == nil {
		return out // all replayed: answered nil
	}
	j := 0
	for i, l := range logs {
		if l.Type == raft.LogCommand {
			if !ents[j].Unanswered {
				out[i] = &res[j]
			}
			j++
		}
	}
	return out
}

// Restore replaces the state with the snapshot rc holds.
func (a raftFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	return a.m.Restore(rc)
}

// Snapshot captures the state; Persist writes it to raft's sink.
func (a raftFSM) Snapshot() (raft.FSMSnapshot, error) { return raftSnapshot{a.m.Snapshot()}, nil }

type raftSnapshot struct{ s *node.MachineSnapshot }

func (r raftSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := r.s.WriteTo(sink); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (r raftSnapshot) Release() { r.s.Release() }
