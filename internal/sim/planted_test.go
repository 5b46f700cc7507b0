//go:build !simbugs

package sim

import (
	"bufio"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// plantFromFlag plants nothing: this build cannot (-sim.plant needs
// -tags simbugs).
func plantFromFlag(t *testing.T) {
	if *plantName != "" {
		t.Fatal("-sim.plant needs a build with -tags simbugs")
	}
}

// TestPlantedBugsAreCaught runs the planted bugs (planted_simbugs_test.go)
// in a build of the package with the simbugs tag, where the product's
// internal/plant hooks can be switched on: in this build, as in every
// shipped one, they cannot.
func TestPlantedBugsAreCaught(t *testing.T) {
	if !slow() {
		t.Skip("the slow tier (-sim.slow or FENCELOCK_SIM_SLOW=1): builds the package with -tags simbugs and runs seeds until each planted bug is caught")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "test", "-tags", "simbugs", "-count=1", "-run", "^TestPlantedBugsAreCaught$", "-v", "./internal/sim")
	cmd.Dir = root
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var tail []string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		if strings.Contains(line, "planted ") {
			t.Log(strings.TrimSpace(line))
		}
		tail = append(tail, line)
		if len(tail) > 40 {
			tail = tail[1:]
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the planted bugs' run failed: %v\n%s", err, strings.Join(tail, "\n"))
	}
}
