package auth

import (
	"context"
	"log/slog"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/acl"
	"github.com/fencelock/fencelock/internal/service"
	"github.com/fencelock/fencelock/internal/service/servicemetrics"
)

// fixedTables are tables that are always the leader's: the guard never
// asks anyone.
type fixedTables struct{ st *acl.State }

func (f fixedTables) ACL() (*acl.State, bool)                             { return f.st, true }
func (f fixedTables) ACLWatch() (*acl.State, <-chan struct{})             { return f.st, nil }
func (f fixedTables) ReadyWatch() (bool, <-chan struct{})                 { return true, nil }
func (f fixedTables) Alone() bool                                         { return true }
func (f fixedTables) LeaderACLRevision(context.Context) (uint64, error)   { return 0, nil }
func (f fixedTables) WaitApplied(context.Context, uint64) bool            { return true }
func (f fixedTables) OwnACL(context.Context) (*acl.State, *service.Error) { return f.st, nil }

// bobReads is the context of a call of bob, authenticated by a guard
// whose tables let him read "b/" but not "b/secret/", and all of "c/".
func bobReads(t *testing.T) context.Context {
	t.Helper()
	st, err := acl.Empty().Bootstrap(acl.HashToken("admin-secret"))
	must := func(next *acl.State, e error) {
		t.Helper()
		if e != nil {
			t.Fatal(e)
		}
		st = next
	}
	must(st, err)
	must(st.SetPolicy(acl.Policy{Name: "reader", Rules: []acl.Rule{
		{Prefix: "b/", Verbs: acl.Read}, {Prefix: "b/secret/", Verbs: acl.Read, Deny: true}, {Prefix: "c/", Verbs: acl.Read}}}))
	must(st.SetPrincipal(acl.Principal{Name: "bob", Policies: []string{"reader"}, TokenHash: acl.HashToken("bob-secret")}, false))
	g := NewGuard(fixedTables{st}, slog.New(slog.DiscardHandler))
	t.Cleanup(g.Close)
	ctx, e := g.Authenticate(context.Background(), "Bearer bob-secret", nil, Read("list"))
	if e != nil {
		t.Fatal(e)
	}
	return ctx
}

// A caller that may read only some keys is shown the items on those and
// no figure that sums a key it may not read; a call without a principal
// is shown everything.
func TestRedactionShowsOnlyWhatTheCallerMayRead(t *testing.T) {
	bob := bobReads(t)
	list := func() api.ListResponse {
		return api.ListResponse{Locks: []api.Lease{{Key: "b/1"}, {Key: "b/secret/x"}, {Key: "c/1"}}}
	}
	keys := func(l api.ListResponse) (ks []string) {
		for _, x := range l.Locks {
			ks = append(ks, x.Key)
		}
		return ks
	}
	if got := keys(RedactList(bob, list())); !slices.Equal(got, []string{"b/1", "c/1"}) {
		t.Errorf("bob's list: %v", got)
	}
	if got := keys(RedactList(context.Background(), list())); len(got) != 3 {
		t.Errorf("a list without a principal: %v", got)
	}

	overview := func() api.Overview {
		return api.Overview{LastToken: 9, Queued: 2, SessionsOpen: 3,
			Locks:    []api.LockOverview{{Lease: api.Lease{Key: "b/1", Session: 1}}, {Lease: api.Lease{Key: "b/secret/x", Session: 2}}},
			Sessions: []api.SessionOverview{{Session: api.Session{ID: 1, Locks: 2, Waiting: 1}, Keys: []string{"b/1", "b/secret/y"}}, {Session: api.Session{ID: 2, Locks: 1}, Keys: []string{"b/secret/x"}}},
			Stats:    api.Stats{Hold: api.Histogram{BoundsMs: []float64{1}, Counts: []uint64{4, 5}}}}
	}
	o := RedactOverview(bob, overview())
	if len(o.Locks) != 1 || o.Locks[0].Key != "b/1" {
		t.Errorf("bob's overview leases: %+v", o.Locks)
	}
	if len(o.Sessions) != 1 || !slices.Equal(o.Sessions[0].Keys, []string{"b/1"}) || o.Sessions[0].Locks != 1 || o.Sessions[0].Waiting != 0 {
		t.Errorf("bob's overview sessions: %+v", o.Sessions)
	}
	if o.LastToken != 0 || o.Queued != 0 || o.SessionsOpen != 0 || !o.StatsHidden || !slices.Equal(o.Stats.Hold.Counts, []uint64{0, 0}) || !slices.Equal(o.Stats.Hold.BoundsMs, []float64{1}) {
		t.Errorf("bob's overview figures: %+v", o)
	}
	if o := RedactOverview(context.Background(), overview()); o.StatsHidden || o.LastToken != 9 || o.SessionsOpen != 3 || len(o.Locks) != 2 || len(o.Sessions) != 2 {
		t.Errorf("an overview without a principal: %+v", o)
	}

	sc := WatchScope(bob, "10.0.0.1")
	if sc.Caller != "principal bob" || sc.Visible == nil || !sc.Visible("b/1") || sc.Visible("b/secret/x") {
		t.Errorf("bob's watch scope: %q", sc.Caller)
	}
	if sc := WatchScope(context.Background(), "10.0.0.1"); sc.Caller != "10.0.0.1" || sc.Visible != nil {
		t.Errorf("a watch without a principal: %+v", sc)
	}
}

// /metrics shows a series counted by prefix only to a caller that may
// read every key under it, "other" only to one that may read every key.
func TestRedactMetricsByPrefix(t *testing.T) {
	reg := prometheus.NewRegistry()
	byPrefix := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "by_prefix", Help: "h"}, []string{servicemetrics.PrefixLabel})
	for _, p := range []string{"b/", "c/", servicemetrics.OtherPrefix} {
		byPrefix.WithLabelValues(p).Set(1)
	}
	reg.MustRegister(byPrefix, prometheus.NewGauge(prometheus.GaugeOpts{Name: "plain", Help: "h"}))

	shown := func(g prometheus.Gatherer) (out []string) {
		mfs, err := g.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			for _, m := range mf.Metric {
				name := mf.GetName()
				for _, l := range m.GetLabel() {
					name += " " + l.GetValue()
				}
				out = append(out, name)
			}
		}
		return out
	}
	g, redacted := RedactMetrics(bobReads(t), reg)
	if got := shown(g); !redacted || !slices.Equal(got, []string{"by_prefix c/", "plain"}) {
		t.Errorf("bob's metrics (redacted %v): %v", redacted, got)
	}
	if g, redacted := RedactMetrics(context.Background(), reg); redacted || len(shown(g)) != 4 {
		t.Errorf("metrics without a principal (redacted %v): %v", redacted, shown(g))
	}
}

// /metrics shows the figures that sum the whole table (the last token,
// leases, grants, …) only to a caller that may read every key, as the
// overview does; the node's own health to every principal; a fencelock
// family not known to count no keys is hidden.
func TestRedactMetricsTableFigures(t *testing.T) {
	reg := prometheus.NewRegistry()
	for _, name := range []string{"fencelock_last_token", "fencelock_leases", "fencelock_grants_total", "fencelock_new_table_figure",
		"fencelock_is_leader", "fencelock_connections_open", "fencelock_raft_state", "go_goroutines"} {
		reg.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: "h"}))
	}
	names := func(g prometheus.Gatherer) (out []string) {
		mfs, err := g.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			out = append(out, mf.GetName())
		}
		return out
	}
	g, _ := RedactMetrics(bobReads(t), reg)
	if got, want := names(g), []string{"fencelock_connections_open", "fencelock_is_leader", "fencelock_raft_state", "go_goroutines"}; !slices.Equal(got, want) {
		t.Errorf("bob, who may not read every key, is shown %v; want %v", got, want)
	}
	if g, _ := RedactMetrics(context.Background(), reg); len(names(g)) != 8 {
		t.Errorf("without a principal: %v", names(g))
	}
}
