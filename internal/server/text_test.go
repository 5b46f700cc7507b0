package server

import (
	"net/url"
	"testing"

	"github.com/fencelock/fencelock/api"
)

// Issue 41, item 4: keys could hold C1 controls and invisible or
// bidirectional characters (U+0085, U+2028, U+200B, U+202E): a key
// "jobs/\u202eterces" is shown as "jobs/secret". They are refused 400
// invalid_argument naming the field with ACLs off and on, in keys,
// holders and prefixes, and nothing is applied.
func TestKeysRefuseCharactersNotShownAsThemselvesInEveryConfiguration(t *testing.T) {
	for _, acls := range []bool{false, true} {
		ts := startServer(t, fastConfig(""))
		token := ""
		if acls {
			token = ts.token(ts.bootstrap(), "bob", "jobs/:lock,read")
		}
		applied := ts.fsm.AppliedIndex()
		for _, c := range []string{"\u0085", "\u2028", "\u200b", "\u202e", "\u2066", "\ufeff"} {
			for _, q := range []struct {
				what, method, path, body, field string
			}{
				{"key", "POST", api.PathAcquire, jsonAcquire("jobs/a"+c+"b", "bob"), "key"},
				{"holder", "POST", api.PathAcquire, jsonAcquire("jobs/a", "bob/"+c), "holder"},
				{"prefix", "GET", api.PathLocks + "?prefix=" + url.QueryEscape("jobs/"+c), "", "prefix"},
				{"get", "GET", api.PathLock + "?key=" + url.QueryEscape("jobs/"+c), "", "key"},
			} {
				a := ts.authDo(q.method, q.path, q.body, token)
				if a.status != 400 || a.body["code"] != api.CodeInvalid || a.body["field"] != q.field {
					t.Errorf("ACLs %v, %U in a %s: %d %v, want 400 invalid_argument on %s", acls, []rune(c)[0], q.what, a.status, a.body, q.field)
				}
			}
		}
		if got := ts.fsm.AppliedIndex(); got != applied {
			t.Errorf("ACLs %v: refused calls applied entries: index %d, was %d", acls, got, applied)
		}
		if a := ts.authDo("POST", api.PathAcquire, jsonAcquire("jobs/résumé", "bob"), token); a.status != 200 {
			t.Errorf("ACLs %v: jobs/résumé: %d %v", acls, a.status, a.body)
		}
	}
}
