//go:build simbugs

package sim

import (
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/plant"
)

// planted is a bug planted in the product through internal/plant, the
// world it is looked for in, and the most seeds it may take.
type planted struct {
	name   string
	what   string
	cfg    func(*Config)
	within uint64
}

var plants = []planted{
	{"ack-before-fsync", "a follower acknowledges entries it writes only with its next Ready (internal/node/etcd, core.ready)", nil, 200},
	{"torn-tail-accepted", "a log that ends before the entries the state file says were written is taken (internal/node, openStores)",
		func(c *Config) { c.Focus = focusRot }, 200},
	{"floor-not-raised", "the token ceiling is not raised past the tokens a batch issued (internal/node, Machine.ApplyBatch)", nil, 200},
	{"snapshot-over-newer-log", "a node restored from its snapshot drops the newer log after it (internal/node/etcd, etcdDropStaleLog)", nil, 200},
	{"apply-uncommitted", "a node applies entries as it appends them, before they commit (internal/node/etcd, core.ready)", nil, 200},
	{"removed-member-counted", "raft goes on counting a member the configuration removed (internal/node/etcd, core.applyConfChanges)",
		func(c *Config) { c.Focus = focusMembership }, 200},
	{"session-renewal-refused", "a lock taken again under the session that holds it is refused, not renewed (internal/locktable, AcquireWith)", nil, 200},
	{"handoff-skips-head", "a hand-off grants the last waiter, not the first (internal/locktable, handOff)", nil, 200},
	{"lock-delay-ignored", "a key in its lock-delay is granted (internal/locktable, inDelay)",
		func(c *Config) { c.Focus = focusLeases }, 400},
	{"release-ignores-holder", "a release by another holder releases a live lock (internal/locktable, Release)", nil, 200},
	{"keepalive-gives-up-late", "the keep-alive gives up a TTL/8 later than the safe-stop rule says (client, deadlineLocked)",
		func(c *Config) { c.Focus = focusLeases }, 400},
	{"acl-deleted-token-cached", "a guard remembers the principals of tokens it resolved, and a deleted token still names its principal (internal/auth, Authenticate)",
		func(c *Config) { c.ACL = true }, 200},
	{"quota-in-flight-ignored", "a leader counts a principal's applied leases and sessions against its quotas but not its own proposals in flight (internal/service, reserve)",
		func(c *Config) { c.ACL, c.Quotas = true, true }, 200},
	{"acl-decision-cached", "a guard remembers what it allowed a principal, and a policy change does not take it back (internal/auth, view.may)",
		func(c *Config) { c.ACL = true }, 200},
}

// plantFromFlag plants -sim.plant for a TestSeeds or TestReplay run.
func plantFromFlag(t *testing.T) {
	if *plantName != "" {
		plant.Set(*plantName)
		t.Cleanup(func() { plant.Set("") })
	}
}

func TestPlantedBugsAreCaught(t *testing.T) {
	for _, p := range plants {
		t.Run(p.name, func(t *testing.T) {
			plant.Set(p.name)
			defer plant.Set("")
			cfg := DefaultConfig()
			cfg.Shaped = false // three nodes, the default TTLs and snapshots
			cfg.Writes = *writes
			if p.cfg != nil {
				p.cfg(&cfg)
			}
			start := time.Now()
			for s := uint64(1); s <= p.within; s++ {
				if r := runSeed(t, s, cfg); len(r.Violations) > 0 {
					t.Logf("planted %s: caught at seed %d (%s, %.1fs): %s", p.name, s, p.what, time.Since(start).Seconds(), r.Violations[0])
					return
				}
			}
			t.Errorf("planted %s: not caught within %d seeds (%s)", p.name, p.within, p.what)
		})
	}
	t.Run("fast-leader-clock", func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.Shaped = false
		cfg.FastLeader = 0.25
		// Leases that outlive failovers: clients cut off for about a
		// TTL between leaders frozen or cut off, on TTLs a cut outlasts.
		cfg.Focus = focusFailover
		cfg.TTLs = []time.Duration{1500 * time.Millisecond, 3 * time.Second}
		cfg.Writes = *writes
		start := time.Now()
		for s := uint64(1); s <= 200; s++ {
			if r := runSeed(t, s, cfg); len(r.Violations) > 0 {
				t.Logf("planted fast-leader-clock: caught at seed %d (every leader after the first runs its clock 25%% fast, the world's own; %.1fs): %s", s, time.Since(start).Seconds(), r.Violations[0])
				return
			}
		}
		t.Error("planted fast-leader-clock: not caught within 200 seeds")
	})
}
