package sim

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// plant is a bug the simulation must catch: a change to the product's
// source, made in a copy of the module, and the most seeds it may take.
type plant struct {
	name, file, old, new string
	within               int
}

var plants = []plant{
	{"keep-alive gives up one tick late", "client/internal/keepalive/keepalive.go",
		"func (k *Keeper) deadlineLocked() time.Time { return k.lastSent.Add(BudgetFor(k.cfg.TTL).GiveUp) }",
		"func (k *Keeper) deadlineLocked() time.Time { return k.lastSent.Add(BudgetFor(k.cfg.TTL).GiveUp + k.cfg.TTL/8) }", 3000},
	{"hand-off skips the head waiter", "internal/locktable/table.go",
		"\tw := q.waiters[0]\n\tt.grant(e, w.holder, now, w.ttl, w.since, grantOpts{sess: w.sess, delay: w.delay})",
		"\tw := q.waiters[len(q.waiters)-1]\n\tt.grant(e, w.holder, now, w.ttl, w.since, grantOpts{sess: w.sess, delay: w.delay})", 400},
	{"release ignores the holder", "internal/locktable/table.go",
		"\tif !e.held() || !e.alive(now) || e.holder.name != holder {\n\t\tt.tidy(e) // settle may have emptied it",
		"\tif !e.held() || !e.alive(now) {\n\t\tt.tidy(e) // settle may have emptied it", 400},
}

// TestPlantedBugsAreCaught plants each bug in a copy of the module and
// runs the seeds there: the run must fail, naming a seed.
func TestPlantedBugsAreCaught(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles a copy of the module per planted bug")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range plants {
		t.Run(p.name, func(t *testing.T) {
			dir := t.TempDir()
			copyModule(t, root, dir)
			path := filepath.Join(dir, p.file)
			src, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Count(string(src), p.old) != 1 {
				t.Fatalf("the plant no longer applies to %s: update it to the code as it is", p.file)
			}
			if err := os.WriteFile(path, []byte(strings.Replace(string(src), p.old, p.new, 1)), 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("go", "test", "-count=1", "-run", "^TestSeeds$", "./internal/sim", "-sim.seeds", itoa(p.within), "-v")
			cmd.Dir = dir
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("not caught within %d seeds:\n%s", p.within, tail(out))
			}
			m := regexp.MustCompile(`seed (\d+): .* (\d+) violations`).FindSubmatch(out)
			if m == nil {
				t.Fatalf("the run failed without naming a seed:\n%s", tail(out))
			}
			t.Logf("caught first at seed %s (%s violations)", m[1], m[2])
		})
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

func itoa(n int) string { return strconv.Itoa(n) }

func tail(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return strings.Join(lines, "\n")
}

// copyModule copies the module's Go sources and module files from root to
// dir (not .git, not the separate bench module, not node_modules).
func copyModule(t *testing.T, root, dir string) {
	t.Helper()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			switch d.Name() {
			case ".git", "node_modules", "bench", "clients", "docs":
				if rel != "." {
					return filepath.SkipDir
				}
			}
			return os.MkdirAll(filepath.Join(dir, rel), 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, rel), data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}
