package service

import (
	"context"
	"testing"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/locktable"
)

// unshown are characters a key, holder or prefix may not hold (issue 41,
// item 4): C0 and C1 controls and DEL, line and paragraph separators,
// zero-width characters and bidirectional controls, and a byte that is
// not UTF-8 (the framed binary calls carry raw bytes).
var unshown = map[string]string{
	"NUL": "\x00", "US": "\x1f", "DEL": "\x7f", "U+0085 (NEL)": "\u0085", "U+009F": "\u009f",
	"U+2028": "\u2028", "U+2029": "\u2029",
	"U+200B": "\u200b", "U+200C": "\u200c", "U+200D": "\u200d", "U+2060": "\u2060", "U+FEFF": "\ufeff", "U+00AD": "\u00ad",
	"U+200E": "\u200e", "U+200F": "\u200f", "U+061C": "\u061c", "U+202A": "\u202a", "U+202E": "\u202e",
	"U+2066": "\u2066", "U+2069": "\u2069",
	"byte 0x85": "\x85", "byte 0xff": "\xff",
}

// Keys, holders and prefixes with such a character are refused 400
// invalid_argument naming the field, whatever the configuration (the
// service knows no ACLs), and nothing is proposed; text that is shown as
// itself is taken.
func TestKeysHolderAndPrefixesRefuseCharactersNotShownAsThemselves(t *testing.T) {
	s, _, _ := newTestService(t)
	ctx := context.Background()
	applied := s.FSM().AppliedIndex()
	for name, c := range unshown {
		key, holder := "jobs/a"+c+"b", "alice"+c
		_, err := s.Acquire(ctx, "", api.AcquireRequest{Key: key, Holder: "alice", TTLMs: 60000})
		if e := wantCode(t, err, api.CodeInvalid); e.Field != "key" {
			t.Errorf("%s in a key: field %q (%s)", name, e.Field, e.Message)
		}
		_, err = s.Acquire(ctx, "", api.AcquireRequest{Key: "jobs/ok", Holder: holder, TTLMs: 60000})
		if e := wantCode(t, err, api.CodeInvalid); e.Field != "holder" {
			t.Errorf("%s in a holder: field %q (%s)", name, e.Field, e.Message)
		}
		_, err = s.List(ctx, "jobs/"+c, 10)
		if e := wantCode(t, err, api.CodeInvalid); e.Field != "prefix" {
			t.Errorf("%s in a prefix: field %q (%s)", name, e.Field, e.Message)
		}
		_, err = s.OpenSession(ctx, "", api.SessionOpenRequest{Holder: holder, TTLMs: 60000})
		if e := wantCode(t, err, api.CodeInvalid); e.Field != "holder" {
			t.Errorf("%s in a session's holder: field %q", name, e.Field)
		}
		_, err = s.AcquireAll(ctx, "", api.AcquireAllRequest{Keys: []string{"jobs/ok", key}, Holder: "alice", TTLMs: 60000})
		if e := wantCode(t, err, api.CodeInvalid); e.Field != "keys[1]" {
			t.Errorf("%s in acquire-all's keys: field %q", name, e.Field)
		}
		_, err = s.Watch(ctx, api.WatchRequest{Prefix: "jobs/" + c}, WatchScope{Caller: "t"})
		if e := wantCode(t, err, api.CodeInvalid); e.Field != "prefix" {
			t.Errorf("%s in a watch's prefix: field %q", name, e.Field)
		}
		_, err = s.ACLSetPolicy(ctx, api.ACLPolicy{Name: "p", Rules: []api.ACLRule{{Prefix: "ok/", Verbs: []string{"read"}}, {Prefix: "jobs/" + c, Verbs: []string{"read"}}}})
		if e := wantCode(t, err, api.CodeInvalid); e.Field != "rules[1].prefix" {
			t.Errorf("%s in a policy's prefix: field %q (%s)", name, e.Field, e.Message)
		}
	}
	if got := s.FSM().AppliedIndex(); got != applied {
		t.Fatalf("refused calls were proposed: applied %d, was %d", got, applied)
	}
	for _, key := range []string{"jobs/résumé", "jobs/日本語", "jobs/a b", "jobs/🔒", "jobs/\ufffd"} {
		if _, err := s.Acquire(ctx, "", api.AcquireRequest{Key: key, Holder: "alice", TTLMs: 60000}); err != nil {
			t.Errorf("acquire %q: %v", key, err)
		}
	}
}

// A key written before the check (a log or a snapshot of an older
// version) still loads and is listed; a call naming it is refused, so its
// lease ends at its expiry.
func TestKeysWrittenBeforeTheCheckStillLoad(t *testing.T) {
	s, _, fake := newTestService(t)
	ctx := context.Background()
	old := "jobs/\u202eterces"
	if res, err := s.ProposeForTest(fsm.Command{Op: fsm.OpAcquire, Key: old, Holder: "alice", TTL: 60 * locktable.Second}); err != nil || !res.Granted {
		t.Fatalf("the old grant: %+v %v", res, err)
	}
	data, err := s.FSM().MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	f := fsm.New(nil)
	if err := f.UnmarshalBinary(data); err != nil {
		t.Fatalf("a snapshot holding the key: %v", err)
	}
	l, err := s.List(ctx, "jobs/", 10)
	if err != nil || len(l.Locks) != 1 || l.Locks[0].Key != old {
		t.Fatalf("list: %+v %v", l, err)
	}
	_, err = s.Extend(ctx, api.ExtendRequest{Key: old, Holder: "alice", Token: l.Locks[0].Token, TTLMs: 60000})
	wantCode(t, err, api.CodeInvalid)
	fake.Advance(61 * 1e9)
	eventually(t, "the old lease to expire", func() bool {
		l, _ := s.List(ctx, "jobs/", 10)
		return len(l.Locks) == 0
	})
}
