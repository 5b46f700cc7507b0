package sim

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

// checkModels checks what the prober recorded against the porcupine
// models of internal/e2e, on real time after the world has run (a search
// inside the bubble would have no clock to stop it).
func (r *Result) checkModels() {
	for _, v := range e2e.CheckTokens(r.lin) {
		r.Violations = append(r.Violations, "prober: "+v.String())
	}
	lin := e2e.CheckLinearizable(r.lin, modelTimeout)
	verdict[e2e.Op](r, "plain locks", lin.Result, lin.Ops, nil)
	res, n := e2e.CheckSharedLinearizable(r.shared, modelTimeout)
	verdict(r, "semaphores and read/write locks", res, n, r.shared)
	for _, epoch := range slices.Sorted(maps.Keys(r.multi)) {
		res, n := e2e.CheckMultiLinearizable(r.multi[epoch], modelTimeout)
		verdict(r, fmt.Sprintf("multi-key acquires of epoch %d", epoch), res, n, r.multi[epoch])
	}
	for _, epoch := range slices.Sorted(maps.Keys(r.sess)) {
		res, n := checkSessions(r.sess[epoch], modelTimeout)
		verdict(r, fmt.Sprintf("sessions of epoch %d", epoch), res, n, r.sess[epoch])
	}
}

// verdict counts a history's check; one that is not linearizable is a
// violation, listed with ops.
func verdict[O fmt.Stringer](r *Result, what string, res porcupine.CheckResult, n int, ops []O) {
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
