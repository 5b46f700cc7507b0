package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencelock/fencelock/internal/clustersecret"
)

// fencelock cluster secret prints a new secret on one line, in the form
// the server reads.
func TestClusterSecretPrintsANewSecret(t *testing.T) {
	code, out, errs := runClientCLI(t, nil, "cluster", "secret")
	code2, out2, _ := runClientCLI(t, nil, "cluster", "secret")
	if code != 0 || code2 != 0 || errs != "" || out == out2 || strings.Count(out, "\n") != 1 {
		t.Fatalf("cluster secret: exit %d %q, then %q; stderr %q", code, out, out2, errs)
	}
	if _, err := clustersecret.Parse(out); err != nil {
		t.Fatalf("what cluster secret printed: %v", err)
	}
	if code, _, errs := runClientCLI(t, nil, "cluster", "secret", "extra"); code != exitUsage || !strings.Contains(errs, "unexpected argument") {
		t.Fatalf("cluster secret extra: exit %d, %q", code, errs)
	}
}

// A server with a raft port and no credential refuses to start, in one
// line naming --cluster-secret-file; so do a bad secret file and flags
// that contradict each other. Nothing is started.
func TestServerRaftNeedsACredential(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
		return p
	}
	s, _ := clustersecret.New()
	good := write("good", s.Encode()+"\n", 0o600)
	for _, tc := range []struct {
		args []string
		env  map[string]string
		code int
		want string
	}{
		{[]string{"--raft", "127.0.0.1:0"}, nil, exitUsage, "--raft needs a credential: give every node the same --cluster-secret-file FILE"},
		{[]string{"--raft", "127.0.0.1:0", "--peers", "fencelock-1=127.0.0.1:1,n2=127.0.0.1:2"}, nil, exitUsage, "--cluster-secret-file"},
		{[]string{"--id", "n2", "--raft", "127.0.0.1:0", "--join", "127.0.0.1:1"}, nil, exitUsage, "--cluster-secret-file"},
		{[]string{"--raft", "127.0.0.1:0", "--cluster-secret-file", write("open", s.Encode(), 0o644)}, nil, 1, "has mode 0644: group or others may use it; chmod 600"},
		{[]string{"--raft", "127.0.0.1:0"}, map[string]string{"FENCELOCK_CLUSTER_SECRET_FILE": write("empty", "", 0o600)}, 1, "is empty"},
		{[]string{"--raft", "127.0.0.1:0", "--cluster-secret-file", write("junk", "swordfish\n", 0o600)}, nil, 1, "not a fencelock cluster secret"},
		{[]string{"--raft", "127.0.0.1:0", "--cluster-secret-file", filepath.Join(dir, "missing")}, nil, 1, "no such file"},
		{[]string{"--raft", "127.0.0.1:0", "--cluster-secret-previous-file", good}, nil, exitUsage, "--cluster-secret-previous-file needs --cluster-secret-file"},
		{[]string{"--raft", "127.0.0.1:0", "--cluster-secret-file", good, "--insecure-raft"}, nil, exitUsage, "exclude each other"},
	} {
		args := append([]string{"server", "--data", t.TempDir(), "--listen", "127.0.0.1:0"}, tc.args...)
		code, _, errs := runClientCLI(t, tc.env, args...)
		first := strings.SplitN(strings.TrimSpace(errs), "\n", 2)[0]
		if code != tc.code || !strings.Contains(first, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and a first line with %q", tc.args, code, errs, tc.code, tc.want)
		}
	}
}
