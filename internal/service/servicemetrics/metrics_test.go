package servicemetrics

import (
	"fmt"
	"testing"
)

func TestMetricsLeasePrefixesCapped(t *testing.T) {
	var c prefixCounter
	for i := range 25 {
		c.add(fmt.Sprintf("p%02d/k", i), 20)
		c.add(fmt.Sprintf("p%02d/l", i), 20)
	}
	got := c.counts()
	if c.total != 50 {
		t.Fatalf("total %d, want 50", c.total)
	}
	if len(got) != 21 {
		t.Fatalf("%d series, want 20 prefixes and other: %v", len(got), got)
	}
	if got[0] != (prefixCount{"p00/", 2}) || got[19] != (prefixCount{"p19/", 2}) || got[20] != (prefixCount{"other", 10}) {
		t.Fatalf("prefix counts %v", got)
	}
}
