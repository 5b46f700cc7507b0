package fence

import (
	"fmt"
	"strings"
)

// KeyMap binds resources to the lock keys that guard them, by pattern:
// Verification{Key: m.Key}. A pattern is a resource name, or a prefix
// followed by * (which matches every resource starting with it). The key
// may hold {resource}, which stands for the resource's name. The longest
// pattern that matches binds a resource, an exact name before a prefix
// of the same length; a resource no pattern matches is bound to none.
type KeyMap map[string]string

// Key is the lock key m binds resource to ("" for none).
func (m KeyMap) Key(resource string) string {
	best, key := -1, ""
	for pattern, k := range m {
		score := -1
		if prefix, ok := strings.CutSuffix(pattern, "*"); ok {
			if strings.HasPrefix(resource, prefix) {
				score = 2 * len(prefix)
			}
		} else if pattern == resource {
			score = 2*len(pattern) + 1
		}
		if score > best {
			best, key = score, k
		}
	}
	return strings.ReplaceAll(key, "{resource}", resource)
}

// ParseKeyMap reads entries PATTERN=KEY (split at the first =) into a
// KeyMap: what fence-proxy's --key-map flags hold. A * anywhere but at a
// pattern's end, an empty key, or one pattern given twice is an error.
func ParseKeyMap(entries ...string) (KeyMap, error) {
	m := KeyMap{}
	for _, e := range entries {
		pattern, key, ok := strings.Cut(e, "=")
		switch {
		case !ok || key == "":
			return nil, fmt.Errorf("key map entry %q: want PATTERN=KEY", e)
		case strings.Contains(strings.TrimSuffix(pattern, "*"), "*"):
			return nil, fmt.Errorf("key map entry %q: * may only end a pattern (a prefix)", e)
		}
		if _, dup := m[pattern]; dup {
			return nil, fmt.Errorf("key map entry %q: pattern %q is given twice", e, pattern)
		}
		m[pattern] = key
	}
	return m, nil
}
