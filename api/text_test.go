package api_test

import (
	"strings"
	"testing"
	"unicode"

	"github.com/fencelock/fencelock/api"
)

func TestBadText(t *testing.T) {
	for _, c := range []struct {
		s    string
		r    rune
		at   int
		what string
	}{
		{"a\x00", 0, 1, "U+0000"}, {"a\tb", '\t', 1, "U+0009"}, {"\x7f", 0x7f, 0, "U+007F"},
		{"ab\u0085", 0x85, 2, "U+0085"}, {"\u009b", 0x9b, 0, "U+009B"},
		{"x\u2028", 0x2028, 1, "U+2028"}, {"x\u2029", 0x2029, 1, "U+2029"},
		{"é\u200b", 0x200b, 2, "U+200B"}, {"\u200d", 0x200d, 0, "U+200D"}, {"\ufeff", 0xfeff, 0, "U+FEFF"},
		{"a/\u202eterces", 0x202e, 2, "U+202E"}, {"\u2067", 0x2067, 0, "U+2067"}, {"\u061c", 0x61c, 0, "U+061C"},
		{"ok\x85", 0xfffd, 2, "the byte 0x85, which is not UTF-8"},
	} {
		r, at, bad := api.BadText(c.s)
		if !bad || r != c.r || at != c.at {
			t.Errorf("BadText(%q) = %U, %d, %v; want %U at %d", c.s, r, at, bad, c.r, c.at)
		}
		if err := api.CheckText("key", c.s); err == nil || !strings.HasPrefix(err.Error(), "key holds "+c.what) {
			t.Errorf("CheckText(%q) = %v", c.s, err)
		}
	}
	for _, s := range []string{"", "jobs/a", "a b", "résumé", "日本語/キー", "🔒", "\ufffd", "a.b-c_d@e:f"} {
		if r, at, bad := api.BadText(s); bad {
			t.Errorf("BadText(%q) = %U at %d; want none", s, r, at)
		}
	}
}

// TestBadTextASCII: the ASCII shortcut agrees with the Unicode classes
// for every ASCII character.
func TestBadTextASCII(t *testing.T) {
	for c := rune(0); c < 0x80; c++ {
		want := unicode.In(c, unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp)
		if _, _, bad := api.BadText("k" + string(c)); bad != want {
			t.Errorf("BadText(%U) = %v, want %v", c, bad, want)
		}
	}
}
