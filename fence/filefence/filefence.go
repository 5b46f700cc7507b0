// Package filefence is a durable fence.Fence for a resource that has no
// database: the highest token honoured per resource lives in a file under a
// directory, and a raised mark is on disk (written to a temporary file,
// fsynced, renamed over the old one, directory fsynced) before the effect
// runs, so before its success can be acknowledged. A restarted process that
// opens the same directory refuses every token its predecessor had
// superseded.
//
// The file is rewritten only when a mark rises; a holder writing many times
// under one grant (an equal token) costs no disk write. Every mark is in the
// one file, so a raise costs one fsync plus writing all marks: meant for
// tens or thousands of resources, not millions.
//
// A file that is there but cannot be read back whole (truncated, edited,
// checksum wrong) is an error from Open, never an empty fence: starting
// from zero would let every stale holder back in. A leftover temporary file
// from a crash mid-write is ignored; the rename had not happened, so the
// previous file is intact.
//
// One process owns a directory at a time (an flock on DIR/LOCK where the
// platform has one): two processes each keeping their own marks would not
// fence anything.
package filefence

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/fencelock/fencelock/fence"
)

// FileName is the marks file inside the directory.
const FileName = "marks"

const header = "fencelock filefence v1"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrCorrupt is wrapped by Open's error when the marks file is unreadable.
var ErrCorrupt = errors.New("filefence: marks file is corrupt")

// Fence is a fence.Fence whose marks survive a restart. Use Open.
type Fence struct {
	dir    string
	unlock func() error

	mu        sync.Mutex // guards resources
	resources map[string]*resource

	fileMu sync.Mutex        // serialises rewrites of the file
	marks  map[string]uint64 // what the file holds; guarded by fileMu
	closed bool              // guarded by fileMu
}

type resource struct {
	lock    chan struct{} // held across the check and the effect
	highest uint64        // guarded by lock
}

var _ fence.Fence = (*Fence)(nil)

// Open loads the marks in dir (creating dir if needed) and locks it for this
// process. A missing marks file is an empty fence; a damaged one is an error
// wrapping ErrCorrupt.
func Open(dir string) (*Fence, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("filefence: %w", err)
	}
	unlock, err := lockDir(filepath.Join(dir, "LOCK"))
	if err != nil {
		return nil, err
	}
	marks, err := load(filepath.Join(dir, FileName))
	if err != nil {
		_ = unlock()
		return nil, err
	}
	f := &Fence{dir: dir, unlock: unlock, resources: map[string]*resource{}, marks: marks}
	for name, tok := range marks {
		f.resources[name] = &resource{lock: make(chan struct{}, 1), highest: tok}
	}
	return f, nil
}

var errClosed = errors.New("filefence: fence is closed")

func (f *Fence) isClosed() bool {
	f.fileMu.Lock()
	defer f.fileMu.Unlock()
	return f.closed
}

// Close releases the directory. Admit after Close fails.
func (f *Fence) Close() error {
	f.fileMu.Lock()
	defer f.fileMu.Unlock()
	if f.closed {
		return nil
	}
	f.closed = true
	return f.unlock()
}

func (f *Fence) get(name string) *resource {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.resources[name]
	if r == nil {
		r = &resource{lock: make(chan struct{}, 1)}
		f.resources[name] = r
	}
	return r
}

// Admit implements fence.Fence. A token above the mark is written to disk
// (fsynced) before effect runs; if that fails, effect does not run and
// Admit returns the error. An equal token needs no write.
func (f *Fence) Admit(ctx context.Context, name string, token uint64, effect func(context.Context) error) error {
	if token == 0 {
		return fence.ErrMissingToken
	}
	if f.isClosed() {
		return errClosed
	}
	r := f.get(name)
	select {
	case r.lock <- struct{}{}:
	default:
		select {
		case r.lock <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	defer func() { <-r.lock }()
	if token < r.highest {
		return &fence.StaleTokenError{Resource: name, Token: token, Highest: r.highest}
	}
	if token > r.highest {
		if err := f.persist(name, token); err != nil {
			return err
		}
		r.highest = token
	}
	if effect == nil {
		return nil
	}
	return effect(ctx)
}

// Highest is the highest token honoured on resource (0 if none).
func (f *Fence) Highest(name string) uint64 {
	r := f.get(name)
	r.lock <- struct{}{}
	defer func() { <-r.lock }()
	return r.highest
}

// persist rewrites the file with name raised to token.
func (f *Fence) persist(name string, token uint64) error {
	f.fileMu.Lock()
	defer f.fileMu.Unlock()
	if f.closed {
		return errClosed
	}
	next := make(map[string]uint64, len(f.marks)+1)
	for k, v := range f.marks {
		next[k] = v
	}
	next[name] = token
	if err := write(f.dir, encode(next)); err != nil {
		return fmt.Errorf("filefence: recording token %d for %q: %w", token, name, err)
	}
	f.marks = next
	return nil
}

func encode(marks map[string]uint64) []byte {
	names := make([]string, 0, len(marks))
	for k := range marks {
		names = append(names, k)
	}
	sort.Strings(names)
	var b bytes.Buffer
	b.WriteString(header + "\n")
	for _, k := range names {
		fmt.Fprintf(&b, "%d %s\n", marks[k], strconv.Quote(k))
	}
	fmt.Fprintf(&b, "crc32c %08x\n", crc32.Checksum(b.Bytes(), castagnoli))
	return b.Bytes()
}

// write replaces DIR/marks atomically and durably.
func write(dir string, data []byte) error {
	tmp, err := os.CreateTemp(dir, FileName+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after a successful rename, a no-op
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, FileName)); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func load(path string) (map[string]uint64, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return map[string]uint64{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("filefence: %w", err)
	}
	marks, err := decode(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v (refusing to start with no marks: that would let stale tokens back in; restore the file or remove it deliberately)", ErrCorrupt, path, err)
	}
	return marks, nil
}

func decode(data []byte) (map[string]uint64, error) {
	i := bytes.LastIndex(bytes.TrimSuffix(data, []byte("\n")), []byte("\n"))
	if i < 0 || !bytes.HasSuffix(data, []byte("\n")) {
		return nil, errors.New("no checksum line (truncated?)")
	}
	body, trailer := data[:i+1], strings.TrimSpace(string(data[i+1:]))
	var sum uint32
	if _, err := fmt.Sscanf(trailer, "crc32c %08x", &sum); err != nil {
		return nil, fmt.Errorf("bad checksum line %q (truncated?)", trailer)
	}
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return nil, fmt.Errorf("checksum %08x, file says %08x", got, sum)
	}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 1<<20)
	if !sc.Scan() || sc.Text() != header {
		return nil, fmt.Errorf("first line is not %q", header)
	}
	marks := map[string]uint64{}
	for n := 2; sc.Scan(); n++ {
		tok, quoted, ok := strings.Cut(sc.Text(), " ")
		t, err := strconv.ParseUint(tok, 10, 64)
		if !ok || err != nil || t == 0 {
			return nil, fmt.Errorf("line %d: bad token", n)
		}
		name, err := strconv.Unquote(quoted)
		if err != nil {
			return nil, fmt.Errorf("line %d: bad resource name", n)
		}
		marks[name] = t
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return marks, nil
}
