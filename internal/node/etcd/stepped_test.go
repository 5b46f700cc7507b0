package etcd

import (
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/locktable"
	"github.com/fencelock/fencelock/internal/node"
	"github.com/fencelock/fencelock/internal/sim/disk"
)

// steppedOn opens a stepped node alone over d.
func steppedOn(t *testing.T, d *disk.Disk, f *fsm.FSM) (*Stepped, error) {
	t.Helper()
	return OpenStepped(node.Config{DataDir: "/data", FS: d.FS(), NodeID: "a", ElectionTimeout: 500 * time.Millisecond,
		HeartbeatTimeout: 500 * time.Millisecond, WALSegmentSize: 4 << 10, SnapshotThreshold: 8, TrailingLogs: 4,
		Logger: slog.New(slog.DiscardHandler), AsyncLogWrites: testAsync()}, f, SteppedConfig{Send: func([]Message) {}, Seed: 1 << 40})
}

// lead ticks s until it leads.
func lead(t *testing.T, s *Stepped) {
	t.Helper()
	for range 100 {
		if err := s.Tick(); err != nil {
			t.Fatal(err)
		}
		written(t, s)
		if _, _, leading, _ := s.Raft(); leading {
			return
		}
	}
	t.Fatal("a node alone did not lead after 100 ticks")
}

// written has s write what waits to be written (with asynchronous
// writes), as a driver does after its disk's delay.
func written(t *testing.T, s *Stepped) {
	t.Helper()
	for s.Unwritten() {
		if err := s.Write(); err != nil {
			t.Fatal(err)
		}
	}
}

// grant proposes an acquire of key from another goroutine, as the
// service does, and drives s until it is answered.
func grant(t *testing.T, s *Stepped, key string) uint64 {
	t.Helper()
	data, err := fsm.Encode(fsm.Command{Op: fsm.OpAcquire, Key: key, Holder: "h", TTL: locktable.Second})
	if err != nil {
		t.Fatal(err)
	}
	var res *fsm.Result
	done := make(chan struct{})
	go func() {
		defer close(done)
		res, err = s.Propose(data, time.Second)
	}()
	synctest.Wait()
	if err := s.Run(); err != nil {
		t.Fatal(err)
	}
	written(t, s)
	<-done
	if err != nil || res.Err != nil {
		t.Fatalf("acquire %s: %v %v", key, err, res)
	}
	return res.Lease.Token
}

// A stepped node runs the engine's core, the checked log, the state file
// and snapshots on a disk that loses what was not synced: after a power
// loss it starts again with every acknowledged grant, and after a bit of
// its synced data rots it either refuses to start with a DataDirError or
// starts with every grant.
func TestSteppedNodeOnASimulatedDisk(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				d := disk.New(seed)
				f := fsm.New(nil)
				s, err := steppedOn(t, d, f)
				if err != nil {
					t.Fatal(err)
				}
				lead(t, s)
				var last uint64
				for i := range 30 {
					last = grant(t, s, fmt.Sprint("k", i))
					if i%10 == 9 {
						if err := s.SnapshotNow(false); err != nil {
							t.Fatal(err)
						}
					}
				}
				rot := disk.NoRot
				if seed%2 == 1 {
					rot = disk.RotAny
				}
				d.Crash(true, rot)
				s.Close()

				f2 := fsm.New(nil)
				s2, err := steppedOn(t, d, f2)
				var dde *node.DataDirError
				switch {
				case errors.As(err, &dde):
					if seed%2 == 0 {
						t.Fatalf("refused after a power loss that damaged nothing synced: %v", err)
					}
					return // the rot was found
				case err != nil:
					t.Fatalf("reopening: %v", err)
				}
				defer s2.Close()
				lead(t, s2)
				if got := f2.LastToken(); got != last {
					t.Fatalf("after the power loss the node applied tokens up to %d; %d was acknowledged", got, last)
				}
				if tok := grant(t, s2, "after"); tok <= last {
					t.Fatalf("token %d issued after %d", tok, last)
				}
			})
		})
	}
}

// With asynchronous writes a proposal is answered only once its entry is
// on disk: until the driver calls Write nothing is applied or answered,
// and a power loss then loses an entry nobody was told of; after Write
// the answer comes, and the entry survives the power loss.
func TestSteppedAsyncWritesAnswerOnlyWhatIsDurable(t *testing.T) {
	for _, write := range []bool{false, true} {
		t.Run(fmt.Sprint("write=", write), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				d := disk.New(7)
				open := func(f *fsm.FSM) *Stepped {
					s, err := OpenStepped(node.Config{DataDir: "/data", FS: d.FS(), NodeID: "a", ElectionTimeout: 500 * time.Millisecond,
						HeartbeatTimeout: 500 * time.Millisecond, WALSegmentSize: 4 << 10, Logger: slog.New(slog.DiscardHandler),
						AsyncLogWrites: true}, f, SteppedConfig{Send: func([]Message) {}, Seed: 1 << 40})
					if err != nil {
						t.Fatal(err)
					}
					return s
				}
				s := open(fsm.New(nil))
				lead(t, s)
				before := s.LastIndex()
				data, err := fsm.Encode(fsm.Command{Op: fsm.OpAcquire, Key: "k", Holder: "h", TTL: locktable.Second})
				if err != nil {
					t.Fatal(err)
				}
				var res *fsm.Result
				var perr error
				done := make(chan struct{})
				go func() {
					defer close(done)
					res, perr = s.Propose(data, time.Second)
				}()
				synctest.Wait()
				if err := s.Run(); err != nil {
					t.Fatal(err)
				}
				synctest.Wait()
				select {
				case <-done:
					t.Fatalf("answered before its entry was written: %v %v", res, perr)
				default:
				}
				if !s.Unwritten() || s.LastIndex() != before || s.Applied() > before {
					t.Fatalf("before Write: unwritten %v, log to %d, applied %d; the log ended at %d",
						s.Unwritten(), s.LastIndex(), s.Applied(), before)
				}
				if write {
					written(t, s)
					<-done
					if perr != nil || res.Err != nil {
						t.Fatalf("acquire: %v %v", perr, res)
					}
				}
				d.Crash(true, disk.NoRot)
				s.Close()
				<-done
				if !write && perr == nil {
					t.Fatalf("a proposal never written was answered %v", res)
				}
				f := fsm.New(nil)
				s2 := open(f)
				defer s2.Close()
				lead(t, s2)
				var want uint64
				if write {
					want = res.Lease.Token
				}
				if got := f.LastToken(); got != want {
					t.Fatalf("after the power loss the last token applied is %d, want %d", got, want)
				}
			})
		})
	}
}

// A node alone stands at its first tick (and leads by its second, once
// raft's step has been handled), on its first start and on a restart,
// instead of after raft's randomized election timeout (10 to 19 ticks):
// it has no leader to wait for.
func TestSteppedLoneVoterStandsAtItsFirstTick(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := disk.New(1)
		for run := range 2 {
			f := fsm.New(nil)
			s, err := steppedOn(t, d, f)
			if err != nil {
				t.Fatal(err)
			}
			ticks := 0
			for leading := false; !leading && ticks < 100; {
				if err := s.Tick(); err != nil {
					s.Close()
					t.Fatal(err)
				}
				ticks++
				written(t, s)
				_, _, leading, _ = s.Raft()
			}
			if run == 0 && ticks <= 2 {
				grant(t, s, "k")
			}
			s.Close()
			if ticks > 2 {
				t.Fatalf("run %d: a node alone led after %d ticks, not at its first", run, ticks)
			}
			if f.LastToken() != 1 {
				t.Fatalf("run %d: last token %d", run, f.LastToken())
			}
		}
	})
}
