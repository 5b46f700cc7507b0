package acl

import (
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// on is an empty state with ACLs on.
func on() *State {
	s := Empty()
	s.On = true
	return s
}

// Before bootstrap nothing may be added: whatever anyone made then would
// survive it.
func TestChangesNeedBootstrap(t *testing.T) {
	e := Empty()
	if _, err := e.SetPolicy(Policy{Name: "admin", Rules: AdminRules()}); err != ErrNotBootstrapped {
		t.Errorf("SetPolicy before bootstrap: %v", err)
	}
	if _, err := e.SetPrincipal(Principal{Name: "evil", Policies: []string{"admin"}}, false); err != ErrNotBootstrapped {
		t.Errorf("SetPrincipal before bootstrap: %v", err)
	}
	if _, err := e.DeletePolicy("x"); err != ErrNotBootstrapped {
		t.Errorf("DeletePolicy before bootstrap: %v", err)
	}
	if _, err := e.DeletePrincipal("x"); err != ErrNotBootstrapped {
		t.Errorf("DeletePrincipal before bootstrap: %v", err)
	}
}

func state(t *testing.T, rules ...string) (*State, Principal) {
	t.Helper()
	var rs []Rule
	for _, r := range rules {
		rule, err := ParseRule(r)
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, rule)
	}
	s, err := on().setPolicy(Policy{Name: "p", Rules: rs})
	if err != nil {
		t.Fatal(err)
	}
	p := Principal{Name: "alice", Policies: []string{"p", "missing"}}
	if s, err = s.setPrincipal(p, false); err != nil {
		t.Fatal(err)
	}
	return s, p
}

func TestAllowed(t *testing.T) {
	for _, c := range []struct {
		rules []string
		verb  Verb
		key   string
		want  bool
	}{
		{nil, Lock, "jobs/a", false}, // default deny
		{[]string{"jobs/:lock"}, Lock, "jobs/a", true},
		{[]string{"jobs/:lock"}, Read, "jobs/a", false},
		{[]string{"jobs/:lock"}, Lock, "other/x", false},
		{[]string{"jobs/:lock"}, Lock, "jobs", false},
		{[]string{":lock,read"}, Read, "anything", true},
		{[]string{":admin"}, Admin, "", true},
		{[]string{"jobs/:admin"}, Admin, "", false}, // cluster admin needs the prefix ""
		{[]string{"jobs/:lock", "jobs/secret/:lock:deny"}, Lock, "jobs/secret/1", false},
		{[]string{"jobs/:lock", "jobs/secret/:lock:deny"}, Lock, "jobs/open", true},
		{[]string{"jobs/:lock:deny", "jobs/x/:lock"}, Lock, "jobs/x/1", true}, // longest prefix wins
		{[]string{"jobs/:lock", "jobs/:lock:deny"}, Lock, "jobs/a", false},    // deny beats allow at one prefix
		{[]string{"jobs/:lock:deny", "jobs/:lock"}, Lock, "jobs/a", false},
		{[]string{"jobs/:read:deny", "jobs/:lock"}, Lock, "jobs/a", true}, // a deny of another verb is not this one's
		{[]string{"a:b:lock"}, Lock, "a:b:c", true},                       // colons in the prefix
	} {
		s, p := state(t, c.rules...)
		if got := s.Allowed(p, c.verb, c.key); got != c.want {
			t.Errorf("rules %q: Allowed(%v, %q) = %v, want %v", c.rules, c.verb, c.key, got, c.want)
		}
	}
}

func TestParseRule(t *testing.T) {
	for _, bad := range []string{"jobs/", "jobs/:", "jobs/:write", ":deny"} {
		if _, err := ParseRule(bad); err == nil {
			t.Errorf("ParseRule(%q) = nil error", bad)
		}
	}
	r, err := ParseRule("jobs/:lock,read:deny")
	if err != nil || r != (Rule{Prefix: "jobs/", Verbs: Lock | Read, Deny: true}) {
		t.Errorf("ParseRule = %+v, %v", r, err)
	}
	if r.String() != "jobs/:lock,read:deny" {
		t.Errorf("String = %q", r.String())
	}
}

func TestTokens(t *testing.T) {
	secret, err := NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	s, err := Empty().Bootstrap(HashToken(secret))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Bootstrap(HashToken("x")); err != ErrBootstrapped {
		t.Errorf("second bootstrap: %v", err)
	}
	p, ok := s.ByToken(secret)
	if !ok || p.Name != BootstrapPrincipal || !s.Allowed(p, Admin, "") {
		t.Fatalf("ByToken = %+v, %v", p, ok)
	}
	for _, wrong := range []string{"", secret + "x", strings.ToUpper(secret)} {
		if _, ok := s.ByToken(wrong); ok {
			t.Errorf("ByToken(%q) found a principal", wrong)
		}
	}
	// Replacing a principal's token retires the old one.
	s2, err := s.SetPrincipal(Principal{Name: BootstrapPrincipal, Policies: p.Policies, TokenHash: HashToken("new")}, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s2.ByToken(secret); ok {
		t.Error("the replaced token still authenticates")
	}
	if _, ok := s.ByToken(secret); !ok {
		t.Error("the change modified the state it was made from")
	}
	// The last admin cannot go: nothing could change the tables again.
	if _, err := s2.DeletePrincipal(BootstrapPrincipal); err != ErrLastAdmin {
		t.Fatalf("deleting the last admin: %v", err)
	}
	if _, err := s2.DeletePolicy(AdminPolicy); err != ErrLastAdmin {
		t.Fatalf("deleting the last admin's policy: %v", err)
	}
	if _, err := s2.SetPolicy(Policy{Name: AdminPolicy, Rules: []Rule{{Prefix: "jobs/", Verbs: Admin}}}); err != ErrLastAdmin {
		t.Fatalf("narrowing the last admin's policy: %v", err)
	}
	if _, err := s2.SetPrincipal(Principal{Name: BootstrapPrincipal, TokenHash: HashToken("new")}, true); err != ErrLastAdmin {
		t.Fatalf("taking the last admin's policies: %v", err)
	}
	s2, err = s2.SetPrincipal(Principal{Name: "ops", Policies: []string{AdminPolicy}}, false)
	if err != nil {
		t.Fatal(err)
	}
	s3, err := s2.DeletePrincipal(BootstrapPrincipal)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s3.ByToken("new"); ok || !s3.On {
		t.Error("a deleted principal authenticates, or deleting it turned ACLs off")
	}
	if _, err := s3.SetPrincipal(Principal{Name: "a/b"}, false); err == nil {
		t.Error("a principal name with a slash was accepted")
	}
}

func TestOwnsHolder(t *testing.T) {
	for h, want := range map[string]bool{"alice": true, "alice/w1": true, "alice2": false, "bob/alice": false, "": false} {
		if OwnsHolder("alice", h) != want {
			t.Errorf("OwnsHolder(alice, %q) != %v", h, want)
		}
	}
}

// The engine against a plain model: for each verb, the longest matching
// prefix decides and a deny wins ties.
func TestAllowedModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		alpha := rapid.StringMatching(`[ab/]{0,3}`)
		rules := rapid.SliceOfN(rapid.Custom(func(t *rapid.T) Rule {
			return Rule{Prefix: alpha.Draw(t, "prefix"), Verbs: Verb(rapid.IntRange(1, 7).Draw(t, "verbs")), Deny: rapid.Bool().Draw(t, "deny")}
		}), 0, 8).Draw(t, "rules")
		key := alpha.Draw(t, "key")
		verb := []Verb{Lock, Read, Admin}[rapid.IntRange(0, 2).Draw(t, "verb")]
		// Split the rules over two policies: the result must not depend on it.
		cut := rapid.IntRange(0, len(rules)).Draw(t, "cut")
		s, _ := on().setPolicy(Policy{Name: "one", Rules: rules[:cut]})
		s, _ = s.setPolicy(Policy{Name: "two", Rules: rules[cut:]})
		p := Principal{Name: "p", Policies: []string{"two", "one"}}

		want, best := false, -1
		for _, r := range rules {
			if r.Verbs&verb != 0 && strings.HasPrefix(key, r.Prefix) && len(r.Prefix) >= best {
				if len(r.Prefix) > best {
					want = true
				}
				best = len(r.Prefix)
				want = want && !r.Deny
			}
		}
		if got := s.Allowed(p, verb, key); got != want {
			t.Fatalf("Allowed(%v, %q) = %v, model %v", verb, key, got, want)
		}
	})
}

// The per-call cost of authentication and one authorization: a token
// lookup and a rule walk over 4 policies of 25 rules.
func BenchmarkByTokenAllowed(b *testing.B) {
	s, err := Empty().Bootstrap(HashToken("root"))
	if err != nil {
		b.Fatal(err)
	}
	var names []string
	for p := range 4 {
		pol := Policy{Name: "p" + string(rune('a'+p))}
		for r := range 25 {
			pol.Rules = append(pol.Rules, Rule{Prefix: strings.Repeat("x", r) + "/", Verbs: Lock | Read, Deny: r%5 == 0})
		}
		if s, err = s.SetPolicy(pol); err != nil {
			b.Fatal(err)
		}
		names = append(names, pol.Name)
	}
	if s, err = s.SetPrincipal(Principal{Name: "ci", Policies: names, TokenHash: HashToken("flk_secret")}, false); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		p, ok := s.ByToken("flk_secret")
		if !ok || !s.Allowed(p, Lock, "xxxxxxx/job") {
			b.Fatal("refused")
		}
	}
}

func TestCheckKeyAndPrefix(t *testing.T) {
	for _, c := range []struct {
		s      string
		prefix bool
		ok     bool
	}{
		{"a/b", false, true}, {"a", false, true}, {"a/.b", false, true}, {"a/..b", false, true}, {"a/b.", false, true},
		{"a//b", false, false}, {"a/./b", false, false}, {"a/../b", false, false}, {"a/", false, false}, {"/a", false, false},
		{".", false, false}, {"..", false, false}, {"a/b\x00", false, false}, {"a\nb", false, false}, {"a\x7f", false, false},
		{"", true, true}, {"a/", true, true}, {"a/.", true, true}, {"a/..", true, true}, {"a/b", true, true},
		{"a//", true, false}, {"a/./", true, false}, {"a/../x", true, false}, {"/", true, false}, {"a/\x01", true, false},
	} {
		check := CheckKey
		if c.prefix {
			check = CheckPrefix
		}
		if err := check(c.s); (err == nil) != c.ok {
			t.Errorf("check(%q, prefix %v) = %v, want ok %v", c.s, c.prefix, err, c.ok)
		}
	}
}
