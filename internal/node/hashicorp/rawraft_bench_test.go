package hashicorp

import (
	"io"
	"strconv"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/node"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
)

// nopFSM applies nothing: what is left of a proposal's time is raft's
// and raft-wal's own.
type nopFSM struct{}

func (nopFSM) Apply(*raft.Log) any                 { return nil }
func (nopFSM) Snapshot() (raft.FSMSnapshot, error) { return nil, io.EOF }
func (nopFSM) Restore(rc io.ReadCloser) error      { return rc.Close() }

// BenchmarkRawRaftApply is the engine's floor under our single-node
// path: a bootstrapped one-voter hashicorp/raft on raft-wal in a temp
// dir (each commit fsynced, as the node's log is), applying a 64-byte
// entry to a no-op FSM. Compare it with BenchmarkServiceCycle (two
// proposals per op) in internal/server, on the same disk, same hour:
//
//	go test ./internal/node/hashicorp -run '^$' -bench RawRaftApply -count=5
func BenchmarkRawRaftApply(b *testing.B) {
	for _, conc := range []int{1, 32, 64} {
		b.Run("c"+strconv.Itoa(conc), func(b *testing.B) {
			dir := b.TempDir()
			store, err := wal.Open(dir, wal.WithSegmentSize(node.WALSegmentSize))
			if err != nil {
				b.Fatal(err)
			}
			defer store.Close()
			snaps := raft.NewInmemSnapshotStore()
			addr, trans := raft.NewInmemTransport("")
			conf := raft.DefaultConfig()
			conf.LocalID = "n1"
			conf.Logger = hclog.NewNullLogger()
			conf.HeartbeatTimeout = 50 * time.Millisecond
			conf.ElectionTimeout = 50 * time.Millisecond
			conf.LeaderLeaseTimeout = 50 * time.Millisecond
			conf.BatchApplyCh = true
			if err := raft.BootstrapCluster(conf, store, store, snaps, trans, raft.Configuration{Servers: []raft.Server{{ID: "n1", Address: addr}}}); err != nil {
				b.Fatal(err)
			}
			r, err := raft.NewRaft(conf, nopFSM{}, store, store, snaps, trans)
			if err != nil {
				b.Fatal(err)
			}
			defer r.Shutdown()
			for deadline := time.Now().Add(10 * time.Second); r.State() != raft.Leader; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					b.Fatal("no leader")
				}
			}
			cmd := make([]byte, 64)
			b.ReportAllocs()
			b.ResetTimer()
			if conc == 1 {
				for i := 0; i < b.N; i++ {
					if err := r.Apply(cmd, 5*time.Second).Error(); err != nil {
						b.Fatal(err)
					}
				}
				return
			}
			b.SetParallelism(conc / 2) // x GOMAXPROCS (2 here)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := r.Apply(cmd, 5*time.Second).Error(); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
