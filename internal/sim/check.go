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
	r.verdict("plain locks", lin.Result, lin.Ops)
	res, n := e2e.CheckSharedLinearizable(r.shared, modelTimeout)
	r.verdict("semaphores and read/write locks", res, n)
	if res == porcupine.Illegal {
		for _, o := range r.shared {
			r.Violations = append(r.Violations, "  "+o.String())
		}
	}
	for _, epoch := range slices.Sorted(maps.Keys(r.multi)) {
		res, n := e2e.CheckMultiLinearizable(r.multi[epoch], modelTimeout)
		r.verdict(fmt.Sprintf("multi-key acquires of epoch %d", epoch), res, n)
		if res == porcupine.Illegal {
			for _, o := range r.multi[epoch] {
				r.Violations = append(r.Violations, "  "+o.String())
			}
		}
	}
}

func (r *Result) verdict(what string, res porcupine.CheckResult, ops int) {
	r.Checked += ops
	switch res {
	case porcupine.Illegal:
		r.Violations = append(r.Violations, fmt.Sprintf("prober: the history of %s (%d calls) is not linearizable", what, ops))
	case porcupine.Unknown:
		r.Unchecked++
	}
}
