package simcheck

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/fencelock/fencelock/internal/e2e"
)

// modelTimeout bounds each porcupine search; one that runs out is counted
// in Unchecked, not passed.
const modelTimeout = 20 * time.Second

// Calls are the prober's calls of one world: plain locks, semaphores and
// read/write locks, and (by epoch) multi-key acquires and session calls.
type Calls struct {
	Lin      []e2e.Op
	Shared   []e2e.SharedOp
	Multi    map[int][]e2e.MultiOp
	Sessions map[int][]SessionOp
}

// Verdict is what the models made of a world's calls.
type Verdict struct {
	Violations []string
	Checked    int // calls checked
	Unchecked  int // histories whose check ran out of time
}

// Models checks the prober's calls against the porcupine models of
// internal/e2e and sessions', on real time after the world has run (a
// search inside the bubble would have no clock to stop it).
func Models(c Calls) Verdict {
	var r Verdict
	for _, v := range e2e.CheckTokens(c.Lin) {
		r.Violations = append(r.Violations, "prober: "+v.String())
	}
	lin := e2e.CheckLinearizable(c.Lin, modelTimeout)
	verdict[e2e.Op](&r, "plain locks", lin.Result, lin.Ops, nil)
	res, n := e2e.CheckSharedLinearizable(c.Shared, modelTimeout)
	verdict(&r, "semaphores and read/write locks", res, n, c.Shared)
	for _, epoch := range slices.Sorted(maps.Keys(c.Multi)) {
		res, n := e2e.CheckMultiLinearizable(c.Multi[epoch], modelTimeout)
		verdict(&r, fmt.Sprintf("multi-key acquires of epoch %d", epoch), res, n, c.Multi[epoch])
	}
	for _, epoch := range slices.Sorted(maps.Keys(c.Sessions)) {
		res, n := checkSessions(c.Sessions[epoch], modelTimeout)
		verdict(&r, fmt.Sprintf("sessions of epoch %d", epoch), res, n, c.Sessions[epoch])
	}
	return r
}

// verdict counts a history's check; one that is not linearizable is a
// violation, listed with ops.
func verdict[O fmt.Stringer](r *Verdict, what string, res porcupine.CheckResult, n int, ops []O) {
	r.Checked += n
	switch res {
	case porcupine.Illegal:
		r.Violations = append(r.Violations, fmt.Sprintf("prober: the history of %s (%d calls) is not linearizable", what, n))
		for _, o := range ops {
			r.Violations = append(r.Violations, "  "+o.String())
		}
	case porcupine.Unknown:
		r.Unchecked++
	}
}
