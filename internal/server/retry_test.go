package server

import (
	"testing"
)

// The request-id memory kept by owner (issue 41, item 4) is a state of
// the log: the first leader's first entry switches it (it is ready after
// proposing the cluster's identity), and
// a restarted node has it again from its snapshot or its log, so that a
// renew retried across the restart keeps its first answer.
func TestRememberByOwnerSurvivesARestart(t *testing.T) {
	dir := t.TempDir()
	cfg := fastConfig(dir)
	cfg.SnapshotThreshold, cfg.TrailingLogs = 8, 4
	ts := startServer(t, cfg)
	if !ts.fsm.RemembersByOwner() {
		t.Fatal("ready with the request-id memory still shared")
	}
	ts.post("/v1/acquire", `{"key":"jobs/x","holder":"alice/app","ttl_ms":600000}`)
	renew := `{"key":"jobs/x","holder":"alice/app","ttl_ms":600000,"request_id":"renew-1"}`
	first := ts.post("/v1/renew", renew)
	if first.status != 200 {
		t.Fatalf("renew: %d %v", first.status, first.body)
	}
	if err := ts.snapshotter(t).Snapshot(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	ts.post("/v1/acquire", `{"key":"after","holder":"bob","ttl_ms":600000,"request_id":"b1"}`) // replayed from the log
	last := ts.fsm.LastToken()
	ts.stop()

	ts2 := startServer(t, cfg)
	if !ts2.fsm.RemembersByOwner() {
		t.Fatal("the restarted node lost the memory's rules")
	}
	again := ts2.post("/v1/renew", renew)
	if again.status != 200 || num(again, "token") != num(first, "token") || ts2.fsm.LastToken() != last {
		t.Fatalf("the renew retried after the restart: %d %v (last token %d, was %d); want token %d", again.status, again.body, ts2.fsm.LastToken(), last, num(first, "token"))
	}
}
