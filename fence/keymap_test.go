package fence

import "testing"

func TestKeyMap(t *testing.T) {
	m, err := ParseKeyMap("/acct/*=ledger/acct", "/acct/vip/*=ledger/vip{resource}", "/acct/x=ledger/x", "*=other", "/acct/x*=never")
	if err != nil {
		t.Fatal(err)
	}
	for res, want := range map[string]string{
		"/acct/p":     "ledger/acct",
		"/acct/vip/a": "ledger/vip/acct/vip/a",
		"/acct/x":     "ledger/x", // exact beats a prefix of the same length
		"/acct/xy":    "never",
		"/elsewhere":  "other",
		"":            "other",
	} {
		if got := m.Key(res); got != want {
			t.Errorf("Key(%q) = %q, want %q", res, got, want)
		}
	}
	if got := (KeyMap{"/a/*": "k"}).Key("/b"); got != "" {
		t.Errorf("no match: %q", got)
	}
	for _, bad := range [][]string{{"/a"}, {"/a="}, {"/a/*/b=k"}, {"/a=k", "/a=j"}} {
		if _, err := ParseKeyMap(bad...); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
