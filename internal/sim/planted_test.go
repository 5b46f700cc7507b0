package sim

import "testing"

// TestPlantedBugsAreCaught plants a bug the simulation must catch. (The
// planted bugs of the world before issue 42's were changes made to a copy
// of the module; the new world's are test-only hooks, phase 4 of issue
// 42.)
func TestPlantedBugsAreCaught(t *testing.T) {
	if testing.Short() {
		t.Skip("runs seeds until each planted bug is caught")
	}
	t.Run("a clock 25% fast on every new leader", func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.FastLeader = 0.25
		for s := uint64(1); s <= 1500; s++ {
			if r := runSeed(t, s, cfg); len(r.Violations) > 0 {
				t.Logf("caught first at seed %d: %s", s, r.Violations[0])
				return
			}
		}
		t.Fatal("not caught within 1500 seeds")
	})
}
