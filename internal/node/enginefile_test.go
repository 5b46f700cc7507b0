package node

import (
	"strings"
	"testing"
)

// A directory records the engine of its first start and refuses the
// other, naming both.
func TestCheckEngine(t *testing.T) {
	dir := t.TempDir()
	if err := checkEngine(OSFS{}, dir, EngineEtcd, false); err != nil {
		t.Fatal(err)
	}
	if err := checkEngine(OSFS{}, dir, EngineEtcd, true); err != nil {
		t.Fatalf("the same engine again: %v", err)
	}
	err := checkEngine(OSFS{}, dir, EngineHashicorp, true)
	if err == nil || !strings.Contains(err.Error(), "etcd engine") || !strings.Contains(err.Error(), "hashicorp engine") {
		t.Fatalf("the other engine: %v, want a refusal naming both", err)
	}
}

// A log from before engines were recorded is the hashicorp node's.
func TestCheckEngineLegacy(t *testing.T) {
	if err := checkEngine(OSFS{}, t.TempDir(), EngineHashicorp, true); err != nil {
		t.Fatal(err)
	}
	err := checkEngine(OSFS{}, t.TempDir(), EngineEtcd, true)
	if err == nil || !strings.Contains(err.Error(), "hashicorp engine") {
		t.Fatalf("etcd on a legacy log: %v", err)
	}
}
