package lab

import (
	"errors"
	"fmt"
	"time"

	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/internal/locktable"
)

// errNoQuorum: fewer than a majority of the nodes are up.
var errNoQuorum = errors.New("no majority of nodes is up")

// quorumLock puts a majority gate in front of the lock table, standing for
// Raft or ZooKeeper in front of fencelock's state machine: with fewer than a
// majority up, nothing is granted; otherwise the table decides.
type quorumLock struct {
	nodes, up int
	table     *locktable.Table
}

func (q *quorumLock) acquire(holder string, now time.Duration) (locktable.Lease, error) {
	if q.up < q.nodes/2+1 {
		return locktable.Lease{}, errNoQuorum
	}
	return q.table.Acquire(episodeKey, holder, locktable.Time(now), locktable.Duration(pageTTL))
}

// quorumStory walks block 6's demonstration and returns its lines: the
// quorum decides who may be granted the lock, and still cannot stop A.
func quorumStory() ([]string, error) {
	q := &quorumLock{nodes: 5, up: 5, table: locktable.New()}
	var lines []string
	a, err := q.acquire("A", 0)
	if err != nil {
		return nil, fmt.Errorf("lab: quorum story, A: %w", err)
	}
	lines = append(lines, fmt.Sprintf("%d of %d up, t=0s:     A is granted token %d", q.up, q.nodes, a.Token))

	q.up = 3
	b, err := q.acquire("B", pagePause)
	if err != nil {
		return nil, fmt.Errorf("lab: quorum story, B: %w", err)
	}
	lines = append(lines, fmt.Sprintf("%d of %d up, t=%s: A's lease is over; B is granted token %d",
		q.up, q.nodes, secondsLabel(pagePause), b.Token))

	q.up = 2
	later := 30 * time.Second
	_, err = q.acquire("C", later)
	switch {
	case errors.Is(err, errNoQuorum):
		lines = append(lines, fmt.Sprintf("%d of %d up, t=%s:   C is refused: %v", q.up, q.nodes, secondsLabel(later), err))
	case err != nil:
		return nil, fmt.Errorf("lab: quorum story, C: %w", err)
	default:
		return nil, errors.New("lab: quorum story: C was granted without a majority")
	}

	// A wakes from its pause holding token 1, which the service has long
	// since superseded. Only a fenced resource tells the difference.
	plain, guarded := &resource{}, &resource{guard: fence.NewGuard()}
	verdicts := make([]string, 2)
	for i, r := range []*resource{plain, guarded} {
		if _, err := r.write("B", valueB, b.Token); err != nil {
			return nil, err
		}
		refusal, err := r.write("A", valueA, a.Token)
		if err != nil {
			return nil, err
		}
		verdicts[i] = landedOr(refusal)
	}
	lines = append(lines,
		fmt.Sprintf("A wakes and writes with token %d: unfenced resource %s; fenced %s",
			a.Token, verdicts[0], verdicts[1]))
	return lines, nil
}

func landedOr(err error) string {
	if err != nil {
		return "refuses it"
	}
	return "takes it"
}
