package membership

import (
	"log/slog"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/replica"
	"github.com/fencelock/fencelock/internal/replica/replicatest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testService is the lock service's side of the seam as these tests need
// it: ready and writable while the in-memory log leads, proposals stamped
// with the last applied cluster time.
type testService struct {
	log *replicatest.Log
	fsm *fsm.FSM
}

func (s testService) Ready() bool { return s.log.VerifyLeader() == nil }

func (s testService) Writable() *api.Error {
	if !s.Ready() {
		return &api.Error{Code: api.CodeNotLeader}
	}
	return nil
}

func (s testService) Propose(cmd fsm.Command) error {
	cmd.Now = s.fsm.Now()
	data, err := fsm.Encode(cmd)
	if err != nil {
		return err
	}
	res, err := s.log.Propose(data, time.Second)
	if err != nil {
		return err
	}
	return res.Err
}

func (s testService) ProposalError(err error) *api.Error {
	return &api.Error{Code: api.CodeUnavailable, Message: err.Error()}
}

// newTestCluster is the membership of node n1 over an in-memory log that
// leads, with testService for the lock service. edit changes the
// configuration first; the loops Start runs check once and then not for
// an hour, so a test drives checkMembership itself.
func newTestCluster(t *testing.T, edit func(*Config)) (*Cluster, *replicatest.Log) {
	t.Helper()
	return newTestClusterOver(t, edit, func(l *replicatest.Log) replica.Replicator { return l })
}

// newTestClusterOver is newTestCluster over wrap(the in-memory log).
func newTestClusterOver(t *testing.T, edit func(*Config), wrap func(*replicatest.Log) replica.Replicator) (*Cluster, *replicatest.Log) {
	t.Helper()
	cfg := Config{NodeID: "n1", Logger: slog.New(slog.DiscardHandler), ApplyTimeout: time.Second, JoinCatchUp: time.Second, AnnounceEvery: time.Hour}
	edit(&cfg)
	f := fsm.New(nil)
	log := replicatest.New("n1", f)
	c := New(cfg, f, testService{log: log, fsm: f})
	c.Start(wrap(log))
	t.Cleanup(c.Close)
	return c, log
}
