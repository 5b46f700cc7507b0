package server

import (
	"fmt"
	"strings"
	"testing"
)

// TestListPagesWithACursor: after= continues a listing where a page ended;
// pages of 2 read every key once, in order; an over-long cursor is a 400
// on after.
func TestListPagesWithACursor(t *testing.T) {
	ts, _ := fakeClockServer(t)
	var want []string
	for i := range 5 {
		k := fmt.Sprintf("jobs/%d", i)
		want = append(want, k)
		if a := ts.post("/v1/acquire", `{"key":"`+k+`","holder":"h","ttl_ms":60000}`); a.status != 200 {
			t.Fatalf("acquire: %d %v", a.status, a.body)
		}
	}
	ts.post("/v1/acquire", `{"key":"other","holder":"h","ttl_ms":60000}`)
	var got []string
	after := ""
	for pages := 0; ; pages++ {
		if pages > 3 {
			t.Fatalf("more than 3 pages: %v", got)
		}
		a := ts.get("/v1/locks?prefix=jobs/&limit=2&after=" + after)
		if a.status != 200 {
			t.Fatalf("list: %d %v", a.status, a.body)
		}
		locks := a.body["locks"].([]any)
		for _, l := range locks {
			got = append(got, l.(map[string]any)["key"].(string))
		}
		if len(locks) < 2 {
			break
		}
		after = got[len(got)-1]
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("pages read %v, want %v", got, want)
	}
	if a := ts.get("/v1/locks?after=" + strings.Repeat("k", 1025)); a.status != 400 || a.body["field"] != "after" {
		t.Fatalf("long cursor: %d %v", a.status, a.body)
	}
}
