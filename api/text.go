package api

import (
	"fmt"
	"unicode"
	"unicode/utf8"
)

// Keys, holders and prefixes are text that people read: in a terminal,
// a log line, the dashboard, a policy. Characters that are not shown as
// themselves could make one key look like another, or rewrite what is
// around it: a key "a/\u202Eterces/x" is displayed as "a/x/secret",
// U+2028 and U+0085 end a log line, U+200B is not seen at all. Every
// configuration refuses them in new keys, holders and prefixes (400
// invalid_argument naming the field); keys already in a table or a
// snapshot still load.

// BadText finds the first character of s that a key, a holder or a
// prefix may not hold: a control character (C0, DEL, C1: Unicode's Cc),
// a line or paragraph separator (Zl, Zp), a format character (Cf: the
// zero-width characters U+200B..U+200D, U+2060 and U+FEFF, the
// bidirectional controls U+200E, U+200F, U+061C, U+202A..U+202E and
// U+2066..U+2069, the soft hyphen, …), or a byte that is not UTF-8. It
// returns the character (utf8.RuneError for a bad byte) and its byte
// offset, with ok false when there is none.
func BadText(s string) (r rune, at int, ok bool) {
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			// ASCII, nearly every key and holder: of the classes below
			// only the controls have characters here.
			if b < 0x20 || b == 0x7f {
				return rune(b), i, true
			}
			i++
			continue
		}
		c, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case c == utf8.RuneError && n <= 1:
			return utf8.RuneError, i, true
		case unicode.In(c, unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp):
			return c, i, true
		}
		i += n
	}
	return 0, 0, false
}

// CheckText is BadText as an error naming field ("key", "holder",
// "prefix", ...), nil when s holds no such character.
func CheckText(field, s string) error {
	r, at, bad := BadText(s)
	if !bad {
		return nil
	}
	what := fmt.Sprintf("U+%04X", r)
	if r == utf8.RuneError {
		what = fmt.Sprintf("the byte %#02x, which is not UTF-8", s[at])
	}
	return fmt.Errorf("%s holds %s at byte %d: a key, holder or prefix holds no control character, line or paragraph separator, zero-width or bidirectional formatting character", field, what, at)
}
