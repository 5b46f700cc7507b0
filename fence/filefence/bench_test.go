package filefence

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// seed writes a snapshot of n marks into dir, as a fence that had taken
// n resources one by one would have left after a compaction.
func seed(b *testing.B, dir string, n int) {
	b.Helper()
	marks := make(map[string]Mark, n)
	for i := range n {
		name := fmt.Sprintf("/v/seeded-%07d", i)
		marks[name] = Mark{Resource: name, Highest: uint64(i + 1), LastWrite: uint64(i + 1), Key: "store/v/seeded"}
	}
	if err := os.WriteFile(filepath.Join(dir, FileName), encodeSnapshot(1, marks), 0o644); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkNewResource admits one new resource per iteration (one
// appended, fsynced record; a compaction whenever the log outgrows the
// marks) on a fence that already holds 0, 3,000 or 100,000 marks.
func BenchmarkNewResource(b *testing.B) {
	for _, n := range []int{0, 3_000, 100_000} {
		b.Run(fmt.Sprintf("marks=%d", n), func(b *testing.B) {
			dir := b.TempDir()
			seed(b, dir, n)
			f, err := Open(dir)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			i := 0
			for b.Loop() {
				i++
				if err := f.Admit(ctx, fmt.Sprintf("/v/new-%d", i), uint64(n+i), nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCompact is one compaction of 3,000 and 100,000 marks: a
// snapshot written, fsynced and renamed, and a new log. It happens once
// per max(4096, marks) raises, so its cost per raise is this divided by
// that.
func BenchmarkCompact(b *testing.B) {
	for _, n := range []int{3_000, 100_000} {
		b.Run(fmt.Sprintf("marks=%d", n), func(b *testing.B) {
			dir := b.TempDir()
			seed(b, dir, n)
			f, err := Open(dir)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			for b.Loop() {
				if err := f.store.compact(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
