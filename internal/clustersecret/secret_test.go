package clustersecret

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestEncodeParse(t *testing.T) {
	s, err := New()
	if err != nil {
		t.Fatal(err)
	}
	text := s.Encode()
	if !strings.HasPrefix(text, "fls1_") || len(text) != len("fls1_")+58 || strings.ContainsAny(text[5:], "=-+/ \n") {
		t.Fatalf("encoded %q", text)
	}
	got, err := Parse("  " + text + "\n")
	if err != nil || got != s {
		t.Fatalf("Parse(Encode()) = %v, %v", got, err)
	}
	if other, _ := New(); other == s || other.Fingerprint() == s.Fingerprint() {
		t.Fatal("two secrets alike")
	}
	if strings.Contains(s.String(), text[5:15]) || !strings.Contains(s.String(), s.Fingerprint()) {
		t.Fatalf("String() = %q shows the secret or hides the fingerprint", s.String())
	}
	// One character changed: the checksum catches it.
	b := []byte(text)
	b[20] = map[bool]byte{true: 'a', false: 'b'}[b[20] != 'a']
	for _, bad := range []string{"", "fls1_", text[5:], text[:len(text)-1], string(b), "fls2_" + text[5:], text + "a"} {
		if _, err := Parse(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("Parse(%q) = %v, want ErrMalformed", bad, err)
		}
	}
}

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	s, _ := New()
	write := func(name, text string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if got, err := ReadFile(write("ok", s.Encode()+"\n", 0o600)); err != nil || got != s {
		t.Fatalf("ReadFile of a 0600 file: %v, %v", got, err)
	}
	if got, err := ReadFile(write("ro", s.Encode(), 0o400)); err != nil || got != s {
		t.Fatalf("ReadFile of a 0400 file: %v, %v", got, err)
	}
	for _, c := range []struct {
		path, want string
	}{
		{write("world", s.Encode(), 0o644), "mode 0644"},
		{write("group", s.Encode(), 0o640), "chmod 600"},
		{write("empty", "\n", 0o600), "is empty"},
		{write("junk", "hunter2\n", 0o600), "not a fencelock cluster secret"},
		{filepath.Join(dir, "missing"), "no such file"},
		{dir, "not a regular file"},
	} {
		_, err := ReadFile(c.path)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("ReadFile(%s) = %v, want one line with %q", filepath.Base(c.path), err, c.want)
		}
	}
}
