package lab

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// golden compares got with testdata/name.golden, or rewrites the file when
// the test runs with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./lab -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from %s:\n--- got ---\n%s\n--- want ---\n%s", name, path, got, want)
	}
}

func TestGoldenBlocks(t *testing.T) {
	for n := 1; n <= Blocks; n++ {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			var buf bytes.Buffer
			if err := Print(&buf, Options{Config: DefaultConfig(), Block: n}); err != nil {
				t.Fatal(err)
			}
			golden(t, fmt.Sprintf("block%d", n), buf.Bytes())
		})
	}
}

func TestGoldenAssembly(t *testing.T) {
	var buf bytes.Buffer
	if err := Print(&buf, Options{Config: DefaultConfig(), Quiet: true}); err != nil {
		t.Fatal(err)
	}
	golden(t, "assembly", buf.Bytes())
}

// The full run is the blocks then the assembly, one blank line apart.
func TestFullRunIsThePartsInOrder(t *testing.T) {
	var all, want bytes.Buffer
	if err := Print(&all, Options{Config: DefaultConfig()}); err != nil {
		t.Fatal(err)
	}
	for n := 1; n <= Blocks; n++ {
		b, err := os.ReadFile(filepath.Join("testdata", fmt.Sprintf("block%d.golden", n)))
		if err != nil {
			t.Fatal(err)
		}
		want.Write(b)
		want.WriteString("\n")
	}
	b, err := os.ReadFile(filepath.Join("testdata", "assembly.golden"))
	if err != nil {
		t.Fatal(err)
	}
	want.Write(b)
	if !bytes.Equal(all.Bytes(), want.Bytes()) {
		t.Errorf("full run is not the golden blocks and assembly joined:\n%s", all.Bytes())
	}
}

func TestGoldenVerify(t *testing.T) {
	claims, err := Verify(DefaultConfig(), 0)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	failed, err := WriteClaims(&buf, claims)
	if err != nil {
		t.Fatal(err)
	}
	if failed != 0 {
		t.Errorf("%d claims failed at the page's parameters:\n%s", failed, buf.Bytes())
	}
	golden(t, "verify", buf.Bytes())
}
