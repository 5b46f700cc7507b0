package disk

import (
	"bytes"
	"errors"
	"os"
	"syscall"
	"testing"
)

// A synced write survives a power loss; across seeds, an unsynced one
// spanning sectors is kept, lost or torn between its sectors, never
// within one; a process crash keeps it.
func TestPowerLossKeepsOnlyWhatWasSynced(t *testing.T) {
	var kept, lost, torn int
	pending := bytes.Repeat([]byte{'p'}, 3*sector)
	for seed := range uint64(200) {
		d := New(seed)
		fsys := d.FS()
		if err := fsys.MkdirAll("/a"); err != nil {
			t.Fatal(err)
		}
		f, err := fsys.OpenFile("/a/f", os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		synced := bytes.Repeat([]byte{'s'}, sector)
		if _, err := f.WriteAt(synced, 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt(pending, sector); err != nil {
			t.Fatal(err)
		}
		d.Crash(true, NoRot)
		if _, err := f.WriteAt([]byte("x"), 0); !errors.Is(err, errGone) {
			t.Fatalf("a dead process's handle wrote: %v", err)
		}
		b, err := d.FS().ReadFile("/a/f")
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b[:sector], synced) {
			t.Fatalf("seed %d: synced data lost", seed)
		}
		n := 0
		for s := 1; s*sector < len(b); s++ {
			sec := b[s*sector : min((s+1)*sector, len(b))]
			switch {
			case bytes.Equal(sec, pending[:len(sec)]):
				n++
			case bytes.Count(sec, []byte{0}) == len(sec):
			default:
				t.Fatalf("seed %d: sector %d holds part of a write", seed, s)
			}
		}
		switch n {
		case 3:
			kept++
		case 0:
			lost++
		default:
			torn++
		}
	}
	if kept == 0 || lost == 0 || torn == 0 {
		t.Fatalf("kept %d, lost %d, torn %d: each should happen", kept, lost, torn)
	}

	d := New(1)
	f, _ := d.FS().OpenFile("/f", os.O_RDWR|os.O_CREATE, 0o600)
	f.WriteAt([]byte("cached"), 0)
	d.Crash(false, NoRot)
	if b, _ := d.FS().ReadFile("/f"); string(b) != "cached" {
		t.Fatalf("a process crash lost what the kernel held: %q", b)
	}
}

// The namespace is an ordered journal: a power loss drops a suffix of
// what no sync committed.
func TestPowerLossDropsASuffixOfTheJournal(t *testing.T) {
	outcomes := map[string]bool{}
	for seed := range uint64(100) {
		d := New(seed)
		fsys := d.FS()
		for _, p := range []string{"/x", "/y", "/z"} {
			f, err := fsys.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			f.Close()
		}
		d.Crash(true, NoRot)
		got := ""
		for _, p := range d.Files() {
			got += p
		}
		switch got {
		case "", "/x", "/x/y", "/x/y/z":
		default:
			t.Fatalf("seed %d: %q is not a prefix of the creations", seed, got)
		}
		outcomes[got] = true
	}
	if len(outcomes) < 3 {
		t.Fatalf("only %v happened", outcomes)
	}
	// A sync commits the journal.
	d := New(3)
	fsys := d.FS()
	f, _ := fsys.OpenFile("/k", os.O_RDWR|os.O_CREATE, 0o600)
	f.Sync()
	fsys.MkdirAll("/dir/sub")
	g, _ := fsys.OpenFile("/dir/sub/f", os.O_RDWR|os.O_CREATE, 0o600)
	g.Write([]byte("data"))
	g.Sync()
	fsys.Rename("/dir", "/moved")
	fsys.SyncDir("/")
	d.Crash(true, NoRot)
	if b, err := d.FS().ReadFile("/moved/sub/f"); err != nil || string(b) != "data" {
		t.Fatalf("after a synced rename of its directory: %q %v", b, err)
	}
}

// A sync that failed and forgot never writes what it was to write,
// though reads see it until the power goes; one that only failed leaves
// it to the next.
func TestFailedSyncLosesItsWrites(t *testing.T) {
	d := New(1)
	fsys := d.FS()
	f, _ := fsys.OpenFile("/f", os.O_RDWR|os.O_CREATE, 0o600)
	f.Write([]byte("aaaa"))
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte("bbbb"), 4)
	d.SetFaults(Faults{SyncFail: 1, SyncForget: true})
	if err := f.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("sync: %v, want EIO", err)
	}
	d.SetFaults(Faults{})
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if b, _ := fsys.ReadFile("/f"); string(b) != "aaaabbbb" {
		t.Fatalf("the cache: %q", b)
	}
	d.Crash(true, NoRot)
	if b, _ := d.FS().ReadFile("/f"); string(b) != "aaaa" {
		t.Fatalf("after the power loss: %q", b)
	}

	d = New(1)
	fsys = d.FS()
	f, _ = fsys.OpenFile("/f", os.O_RDWR|os.O_CREATE, 0o600)
	f.Write([]byte("aaaa"))
	d.SetFaults(Faults{SyncFail: 1})
	if err := f.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("sync: %v, want EIO", err)
	}
	d.SetFaults(Faults{})
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	d.Crash(true, NoRot)
	if b, _ := d.FS().ReadFile("/f"); string(b) != "aaaa" {
		t.Fatalf("the next sync did not write what the failed one left: %q", b)
	}
}

func TestFullDiskRefusesWrites(t *testing.T) {
	d := New(1)
	d.SetFaults(Faults{Capacity: 10})
	f, _ := d.FS().OpenFile("/f", os.O_RDWR|os.O_CREATE, 0o600)
	if _, err := f.Write(make([]byte, 8)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(make([]byte, 8)); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write past the capacity: %v", err)
	}
	if err := f.Allocate(64); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("allocate past the capacity: %v", err)
	}
	if _, err := f.WriteAt([]byte("xy"), 0); err != nil {
		t.Fatalf("an overwrite needs no room: %v", err)
	}
}

func TestFlippedReadIsTransient(t *testing.T) {
	d := New(1)
	fsys := d.FS()
	f, _ := fsys.OpenFile("/f", os.O_RDWR|os.O_CREATE, 0o600)
	f.Write(bytes.Repeat([]byte{0}, 64))
	d.SetFaults(Faults{Flip: 1})
	b, _ := fsys.ReadFile("/f")
	if bytes.Equal(b, make([]byte, 64)) {
		t.Fatal("no bit flipped")
	}
	d.SetFaults(Faults{})
	if b, _ := fsys.ReadFile("/f"); !bytes.Equal(b, make([]byte, 64)) {
		t.Fatal("the flip stayed")
	}
}

func TestLockDiesWithItsProcess(t *testing.T) {
	d := New(1)
	if _, err := d.FS().Lock("/data"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.FS().Lock("/data"); err == nil {
		t.Fatal("a second process took the lock")
	}
	d.Crash(false, NoRot)
	if _, err := d.FS().Lock("/data"); err != nil {
		t.Fatalf("the crashed process's lock stayed: %v", err)
	}
}
