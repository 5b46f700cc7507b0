package dashboard_test

// The bad day: a cluster that has lost its quorum, and waiters a
// lock-delay holds back.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fencelock/fencelock/api"
)

// clusterSettled: every node names the same ready leader and knows every
// member's client address.
func clusterSettled(t *testing.T, nodes []*clusterNode) bool {
	leader := ""
	for _, n := range nodes {
		var m api.MembersResponse
		if st := n.call(context.Background(), t, "GET", api.PathMembers, "", nil, &m); st != 200 || m.Leader == "" || m.NoLeader {
			return false
		}
		if leader != "" && m.Leader != leader {
			return false
		}
		leader = m.Leader
		if len(m.Members) != len(nodes) {
			return false
		}
		for _, x := range m.Members {
			if x.ClientAddr == "" {
				return false
			}
		}
	}
	return true
}

// liveJS records, each time the page changes the live dot or the leader
// tile, what both say ("state/leader"), and counts the members table's
// renderings (one a poll).
const liveJS = `window.__live = []; window.__renders = 0;
new MutationObserver(() => {
  const live = document.getElementById('live'), lead = document.getElementById('stat-leader');
  window.__live.push(live.dataset.state + '/' + lead.textContent);
}).observe(document.body, { subtree: true, attributes: true, childList: true, characterData: true });
new MutationObserver(() => { window.__renders++; }).observe(document.getElementById('members-body'), { childList: true });
true`

// TestDashboardShowsAClusterWithoutQuorum (issue 44.1): with two of three
// nodes stopped, the survivor's dashboard said "This node is a follower:
// locks are read on the leader (none is known yet)" beside a green dot,
// over an empty cluster table (its members call answered 503). Now it
// shows a red banner saying there is no quorum and no leader, with how
// many voters the survivor has heard from, every member with its
// last-known state as the survivor saw it, a red dot, and never a green
// dot while it names no leader.
func TestDashboardShowsAClusterWithoutQuorum(t *testing.T) {
	ctx := browser(t, 1280, 900, time.Minute)
	nodes, _ := startCluster(t, 3)
	deadline := time.Now().Add(20 * time.Second)
	for !clusterSettled(t, nodes) {
		if time.Now().After(deadline) {
			t.Fatal("no leader known to every node, with every client address, within 20s")
		}
		time.Sleep(20 * time.Millisecond) // polling the cluster's state, not deciding anything
	}
	var m api.MembersResponse
	nodes[0].call(context.Background(), t, "GET", api.PathMembers, "", nil, &m)
	var survivor *clusterNode
	for _, n := range nodes {
		if n.id != m.Leader {
			survivor = n // a follower, as in the finding
			break
		}
	}
	open(ctx, t, survivor.url+"/ui/?poll=200")
	wait[bool](ctx, t, "the survivor's dashboard live, with a leader", `document.getElementById('live').dataset.state === 'live' && document.getElementById('stat-leader').textContent === `+fmt.Sprintf("%q", m.Leader))
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](liveJS)); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if n != survivor {
			n.stop()
		}
	}

	banner := wait[string](ctx, t, "the no-quorum banner", `(() => { const b = document.getElementById('banner'); return !b.hidden && b.dataset.kind === 'error' && b.dataset.reason === 'no-leader' && b.textContent; })()`)
	for _, want := range []string{"No quorum, no leader", survivor.id + " has heard from 1 of 3 voters", "a quorum is 2"} {
		if !strings.Contains(banner, want) {
			t.Errorf("the banner says %q; want %q in it", banner, want)
		}
	}
	live := wait[string](ctx, t, "the red dot", `document.getElementById('live').dataset.state === 'error' && document.getElementById('live-text').textContent`)
	if live != "no leader" {
		t.Errorf("the live dot says %q", live)
	}
	// Every member, with its last-known state as the survivor saw it: the
	// old leader unreachable (heard from some time ago), the other
	// stopped follower unreachable or never heard from, itself healthy.
	rows := wait[[]string](ctx, t, "every member's last-known state", `(() => {
  const rows = [...document.querySelectorAll('#members-body tr')];
  const healthy = rows.filter(r => r.dataset.state === 'healthy').length;
  const others = rows.filter(r => r.dataset.state === 'unreachable' || r.dataset.state === 'unknown').length;
  return rows.length === 3 && healthy === 1 && others === 2 && rows.map(r => r.dataset.node + ' ' + r.dataset.state + ' ' + r.innerText.replace(/\s+/g, ' '));
})()`)
	t.Logf("the banner: %s\nthe members: %q", banner, rows)
	for _, r := range rows {
		f := strings.Fields(r)
		switch id, state := f[0], f[1]; {
		case id == survivor.id:
			if state != api.MemberHealthy || !strings.Contains(r, "term ") {
				t.Errorf("the survivor's row: %s", r)
			}
		case id == m.Leader:
			if state != api.MemberUnreachable || !strings.Contains(r, "ago by "+survivor.id) {
				t.Errorf("the old leader's row: %s", r)
			}
		default:
			if state != api.MemberUnreachable && !(state == api.MemberUnknown && strings.Contains(r, "never heard from")) {
				t.Errorf("the other follower's row: %s", r)
			}
		}
	}
	if lead := wait[string](ctx, t, "the leader tile", `document.getElementById('stat-leader').textContent`); lead != "none" {
		t.Errorf("the leader tile says %q", lead)
	}
	// Five more polls: the dot never turned green without a leader.
	n := wait[float64](ctx, t, "a poll", `window.__renders`)
	wait[bool](ctx, t, "five more polls", fmt.Sprintf(`window.__renders >= %v`, n+5))
	seen, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`window.__live`))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range seen {
		if strings.HasPrefix(s, "live/") && s != "live/"+m.Leader {
			t.Errorf("a green dot without a leader: %q (all: %q)", s, seen)
		}
	}
	noProblems(ctx, t)
}

// TestDashboardShowsWaitersHeldBackByLockDelay (issue 44.1): a waiter on a
// key in its lock-delay (its lease expired; nobody may have it until the
// delay ends) was counted in the Waiting tile's "queued in all" but shown
// nowhere. Now the key has a row among the leases — nobody holds it, the
// delay counts down — with its waiters, and the tile counts them as
// listed; once the delay ends the head holds the key.
func TestDashboardShowsWaitersHeldBackByLockDelay(t *testing.T) {
	ctx := browser(t, 1280, 900, time.Minute)
	ts := startServer(t)
	open(ctx, t, ts.url+"/ui/?poll=200")
	ts.acquire(t, "jobs/x", "xavier", time.Minute, "")
	if st := ts.call(context.Background(), t, "POST", api.PathAcquire, "", api.AcquireRequest{Key: "jobs/a", Holder: "alice", TTLMs: 300, LockDelayMs: 3000}, nil); st != 200 {
		t.Fatalf("acquire jobs/a: %d", st)
	}
	ts.waiter(t, api.AcquireRequest{Key: "jobs/a", Holder: "bob", TTLMs: 30000, WaitMs: 60000})
	ts.waitQueued(t, 1)
	r := row("jobs/a")
	got := wait[string](ctx, t, "jobs/a in its lock-delay, with bob waiting", r+` && `+r+`.dataset.delayed === 'true' && `+r+`.querySelector('.waiter[data-holder="bob"]') && `+
		`[`+r+`.querySelector('.holder').textContent, `+r+`.querySelector('.delay-tag').textContent, document.getElementById('stat-queued').textContent, document.getElementById('stat-queued-sub').textContent].join('|')`)
	if want := "nobody|lock-delay|1|queued on the keys below"; got != want {
		t.Errorf("the delayed row and the Waiting tile: %q, want %q", got, want)
	}
	if lead := wait[string](ctx, t, "jobs/x", row("jobs/x")+` && `+row("jobs/x")+`.querySelector('.holder').textContent`); lead != "xavier" {
		t.Errorf("jobs/x's holder: %q", lead)
	}
	wait[bool](ctx, t, "bob to hold jobs/a once the delay ends", r+` && !`+r+`.dataset.delayed && `+r+`.querySelector('.holder').textContent === 'bob'`)
	noProblems(ctx, t)
}
