// Package disk is the simulation's disk: a node.FS in memory that keeps,
// as a real disk under a journaling file system does, two states — what
// the process sees (the page cache) and what would survive a power loss —
// and makes faults of the difference.
//
// The model:
//
//   - A file's data reaches the disk only when the file is synced. Writes
//     since its last sync are pending: a process crash (kill -9) keeps
//     them, since the kernel still holds them; at a power loss each sector
//     (512 bytes) of the file holds what the writes to it made of it up to
//     some point of their order, drawn for each sector on its own: a write
//     may be whole, lost, or torn between the sectors it spans, and a
//     later write may survive an earlier one that is lost (reordered),
//     but no sector ever holds part of one write. The file's length is
//     that after some prefix of the writes that changed it.
//   - The namespace (creating, removing and renaming files and
//     directories) is an ordered journal, committed by any sync of a file
//     or a directory, as ext4's is: a power loss drops a suffix of what is
//     not committed yet, never a middle.
//   - A sync may fail (EIO), leaving what it was to make durable to a
//     later sync; or, with SyncForget, never writing it (Linux since
//     4.13 marks the pages clean and reports the error once), though
//     reads go on seeing it until a power loss.
//   - A read may return one flipped bit, that time only.
//   - The disk has a capacity: a write or an allocation beyond it fails
//     with ENOSPC.
//   - A power loss may also rot one bit of the synced data of one file.
//
// Every random decision is drawn from a stream of its own, keyed by the
// disk's seed and what it is about (a file's path and the count of that
// file's operations, a crash's number), so what one part of the world
// does does not change what another draws.
package disk

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fencelock/fencelock/internal/node"
)

// Faults are the disk's standing faults, changed by the world while it
// runs.
type Faults struct {
	SyncFail float64 // probability that a sync fails (EIO)
	// SyncForget: a failed sync drops the writes it was to make durable
	// (Linux since 4.13: the pages are marked clean and the error is
	// reported once), instead of leaving them to a later sync.
	SyncForget bool
	Flip       float64 // probability that a read returns a flipped bit
	Capacity   int64   // bytes the files may hold; 0: no limit
}

// Stats count what the disk did to its writers.
type Stats struct {
	Kept, Lost, Torn int // pending writes at power losses
	JournalLost      int // namespace operations a power loss dropped
	SyncFailed       int
	Flipped          int // reads that returned a flipped bit
	Rotted           int // bits of synced data rotted at a power loss
	NoSpace          int // writes refused for lack of space
	Crashes, Powers  int // process crashes and power losses
}

// Disk is one machine's disk. It is safe for concurrent use.
type Disk struct {
	seed uint64

	mu     sync.Mutex
	gen    int // the process's incarnation: handles of an older one are dead
	faults Faults
	stats  Stats
	// the namespace the process sees, and the one on the medium
	files, dfiles map[string]*file
	dirs, ddirs   map[string]bool
	journal       []metaOp // not committed yet, in order
	locked        map[string]int
	crashes       int
	// doomed: since the last power loss a failed sync dropped writes the
	// cache still shows; damaged: the last power loss left the medium
	// without writes the process had read back, or rotted it.
	doomed, damaged bool
	// failedGen-1 is the incarnation in which a sync last failed or a
	// write found no room (0: never).
	failedGen int
}

// file is one file's data, shared by every name and handle it has.
type file struct {
	path    string // its name when created: the key of its draws
	cur     []byte // what reads see
	durable []byte // what is on the medium
	pending []op   // since the last sync, in order
	ops     int    // operations so far, for keying draws
	written int64  // the end of the data written to the medium (not allocated)
}

// op is a pending change of a file's data: a write, or a truncation
// (trunc set: to len(data)... see size).
type op struct {
	off   int64
	data  []byte
	trunc bool
	size  int64
}

// metaOp is a namespace operation in the journal.
type metaOp struct {
	kind     string // create, remove, rename, mkdir
	path, to string
	f        *file
}

// New is an empty disk whose draws start from seed.
func New(seed uint64) *Disk {
	d := &Disk{seed: seed, files: map[string]*file{}, dfiles: map[string]*file{},
		dirs: map[string]bool{"/": true}, ddirs: map[string]bool{"/": true}, locked: map[string]int{}}
	return d
}

// FS is the disk as the current process sees it; a crash kills every
// handle it opened.
func (d *Disk) FS() node.FS {
	d.mu.Lock()
	defer d.mu.Unlock()
	return &procFS{d: d, gen: d.gen}
}

// SetFaults changes the standing faults.
func (d *Disk) SetFaults(f Faults) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.faults = f
}

// Faults are the standing faults.
func (d *Disk) Faults() Faults {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.faults
}

// Stats are what the disk did so far.
func (d *Disk) Stats() Stats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stats
}

// draw is a random stream for one decision, keyed by what it is about.
func (d *Disk) draw(key string, n int) *rand.Rand {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s#%d", key, n)
	return rand.New(rand.NewPCG(d.seed, h.Sum64()))
}

// Rot says where a power loss rots a bit of synced data.
type Rot int

const (
	NoRot   Rot = iota
	RotAny      // anywhere in the data of any file
	RotTail     // in the data of the last log segment (*.wal)
)

// Crash ends the process that has the disk open: its handles and its
// lock die. A process crash keeps everything the kernel holds; a power
// loss (power) keeps only what was synced, and of the rest what the
// draws say; rot then flips one bit of synced data. It answers what was
// lost, for the trace.
func (d *Disk) Crash(power bool, rot Rot) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.gen++
	d.locked = map[string]int{}
	d.crashes++
	if !power {
		d.stats.Crashes++
		return "process crash: nothing lost"
	}
	d.stats.Powers++
	d.damaged, d.doomed = d.doomed || rot != NoRot, false
	r := d.draw("crash", d.crashes)
	// The journal: a prefix of it made it.
	keep := len(d.journal)
	if keep > 0 {
		keep = r.IntN(keep + 1)
	}
	for _, m := range d.journal[:keep] {
		d.applyMeta(m)
	}
	lostJ := len(d.journal) - keep
	d.stats.JournalLost += lostJ
	d.journal = nil
	var lost, torn, kept int
	for _, f := range d.allFiles() {
		k, l, t := f.powerLoss(d.draw("power:"+f.path, d.crashes))
		kept, lost, torn = kept+k, lost+l, torn+t
	}
	d.stats.Kept += kept
	d.stats.Lost += lost
	d.stats.Torn += torn
	msg := fmt.Sprintf("power loss: %d pending writes kept, %d lost, %d torn, %d namespace changes lost", kept, lost, torn, lostJ)
	if rot != NoRot {
		msg += "; " + d.rotLocked(r, rot)
	}
	// The process that comes back sees the medium.
	d.files = maps(d.dfiles)
	d.dirs = mapsB(d.ddirs)
	for _, f := range d.allFiles() {
		f.cur = slices.Clone(f.durable)
	}
	return msg
}

// rotLocked flips a bit of synced data: of any file's data written (not
// what was only allocated), or of the last log segment's.
func (d *Disk) rotLocked(r *rand.Rand, rot Rot) string {
	var cands []string
	for _, p := range sortedKeys(d.dfiles) {
		if d.dfiles[p].written > 0 && (rot == RotAny || strings.HasSuffix(p, ".wal")) {
			cands = append(cands, p)
		}
	}
	if len(cands) == 0 {
		return "nothing to rot"
	}
	p := cands[r.IntN(len(cands))]
	if rot == RotTail {
		p = cands[len(cands)-1]
	}
	f := d.dfiles[p]
	at := r.Int64N(f.written)
	f.durable[at] ^= 1 << r.IntN(8)
	d.stats.Rotted++
	return fmt.Sprintf("rotted a bit of %s at byte %d of the %d written", p, at, f.written)
}

// allFiles is every file either namespace names, once, by path order.
func (d *Disk) allFiles() []*file {
	seen := map[*file]bool{}
	var out []*file
	for _, m := range []map[string]*file{d.files, d.dfiles} {
		for _, p := range sortedKeys(m) {
			if f := m[p]; !seen[f] {
				seen[f] = true
				out = append(out, f)
			}
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func maps(m map[string]*file) map[string]*file {
	out := make(map[string]*file, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func mapsB(m map[string]bool) map[string]bool {
	out := make(map[string]bool, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// sector is the unit a power loss keeps or loses whole.
const sector = 512

// powerLoss makes the file what the medium holds after a power loss,
// drawing from r, and counts its pending writes kept whole, lost and
// torn.
func (f *file) powerLoss(r *rand.Rand) (kept, lost, torn int) {
	if len(f.pending) == 0 {
		return 0, 0, 0
	}
	// The length: after some prefix of the operations.
	size := int64(len(f.durable))
	for _, o := range f.pending[:r.IntN(len(f.pending)+1)] {
		size = o.sizeAfter(size)
	}
	// Each sector: the durable one after some prefix of the operations
	// that touch it.
	end := size
	for _, o := range f.pending {
		end = max(end, o.off+int64(len(o.data)))
	}
	out := make([]byte, end)
	copy(out, f.durable)
	touched := map[int64][]int{} // sector -> ops, in order
	var sectors []int64
	for i, o := range f.pending {
		for _, s := range o.sectors(int64(len(f.durable))) {
			if _, ok := touched[s]; !ok {
				sectors = append(sectors, s)
			}
			touched[s] = append(touched[s], i)
		}
	}
	slices.Sort(sectors)
	persisted := make([]int, len(f.pending)) // sectors of each op that made it
	for _, s := range sectors {
		ops := touched[s]
		var n int
		switch x := r.IntN(20); {
		case x < 12:
			n = len(ops)
		case x < 17:
			n = 0
		default:
			n = r.IntN(len(ops) + 1)
		}
		lo, hi := s*sector, min((s+1)*sector, end)
		buf := make([]byte, hi-lo)
		copy(buf, f.durable[min(lo, int64(len(f.durable))):min(hi, int64(len(f.durable)))])
		for _, i := range ops[:n] {
			buf = f.pending[i].applyWithin(buf, lo)
			persisted[i]++
			f.written = f.pending[i].writtenAfter(f.written)
		}
		copy(out[lo:hi], buf)
	}
	for i, o := range f.pending {
		switch all := len(o.sectors(int64(len(f.durable)))); {
		case persisted[i] == all:
			kept++
		case persisted[i] == 0:
			lost++
		default:
			torn++
		}
	}
	f.durable = out[:size]
	f.pending = nil
	return kept, lost, torn
}

// sectors are the sectors o touches (a truncation: those it zeroes or
// cuts, from a file of size n).
func (o op) sectors(n int64) []int64 {
	lo, hi := o.off, o.off+int64(len(o.data))
	if o.trunc {
		lo, hi = min(o.size, n), max(o.size, n)
	}
	var out []int64
	for s := lo / sector; s*sector < hi; s++ {
		out = append(out, s)
	}
	return out
}

// writtenAfter is the end of the data written after o, from w.
func (o op) writtenAfter(w int64) int64 {
	if o.trunc {
		return min(w, o.size)
	}
	return max(w, o.off+int64(len(o.data)))
}

// sizeAfter is a file's size after o.
func (o op) sizeAfter(n int64) int64 {
	if o.trunc {
		return o.size
	}
	return max(n, o.off+int64(len(o.data)))
}

// applyWithin applies o to buf, the bytes of the file from lo.
func (o op) applyWithin(buf []byte, lo int64) []byte {
	hi := lo + int64(len(buf))
	if o.trunc {
		for i := max(o.size, lo); i < hi; i++ {
			buf[i-lo] = 0
		}
		return buf
	}
	a, b := max(o.off, lo), min(o.off+int64(len(o.data)), hi)
	if a < b {
		copy(buf[a-lo:b-lo], o.data[a-o.off:b-o.off])
	}
	return buf
}

// apply is the data after o.
func (o op) apply(b []byte) []byte {
	if o.trunc {
		if int64(len(b)) >= o.size {
			return b[:o.size]
		}
		return append(b, make([]byte, o.size-int64(len(b)))...)
	}
	end := o.off + int64(len(o.data))
	if int64(len(b)) < end {
		b = append(b, make([]byte, end-int64(len(b)))...)
	}
	copy(b[o.off:], o.data)
	return b
}

// applyMeta makes m on the medium's namespace.
func (d *Disk) applyMeta(m metaOp) {
	switch m.kind {
	case "create":
		d.dfiles[m.path] = m.f
	case "remove":
		delete(d.dfiles, m.path)
		delete(d.ddirs, m.path)
	case "mkdir":
		d.ddirs[m.path] = true
	case "rename":
		renameIn(d.dfiles, d.ddirs, m.path, m.to)
	}
}

// renameIn renames old to new in a namespace: a file, or a directory
// with everything under it.
func renameIn(files map[string]*file, dirs map[string]bool, old, new string) {
	if f, ok := files[old]; ok {
		delete(files, old)
		files[new] = f
		return
	}
	pre := old + "/"
	for _, p := range sortedKeys(files) {
		if strings.HasPrefix(p, pre) {
			files[new+"/"+strings.TrimPrefix(p, pre)] = files[p]
			delete(files, p)
		}
	}
	for _, p := range sortedKeys(dirs) {
		if p == old || strings.HasPrefix(p, pre) {
			delete(dirs, p)
			dirs[new+strings.TrimPrefix(p, old)] = true
		}
	}
}

// commitLocked writes the journal to the medium.
func (d *Disk) commitLocked() {
	for _, m := range d.journal {
		d.applyMeta(m)
	}
	d.journal = nil
}

// logMeta makes m in the process's namespace and journals it.
func (d *Disk) logMeta(m metaOp) {
	switch m.kind {
	case "create":
		d.files[m.path] = m.f
	case "remove":
		delete(d.files, m.path)
		delete(d.dirs, m.path)
	case "mkdir":
		d.dirs[m.path] = true
	case "rename":
		renameIn(d.files, d.dirs, m.path, m.to)
	}
	d.journal = append(d.journal, m)
}

// used is the bytes the process's files hold.
func (d *Disk) used() int64 {
	var n int64
	seen := map[*file]bool{}
	for _, f := range d.files {
		if !seen[f] {
			seen[f] = true
			n += int64(len(f.cur))
		}
	}
	return n
}

// room refuses growing the files by n bytes beyond the capacity.
func (d *Disk) room(n int64) error {
	if n <= 0 || d.faults.Capacity <= 0 || d.used()+n <= d.faults.Capacity {
		return nil
	}
	d.stats.NoSpace++
	d.failedGen = d.gen + 1
	return syscall.ENOSPC
}

// Files lists the paths of the process's files, sorted (tests, traces).
func (d *Disk) Files() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return sortedKeys(d.files)
}

// Wipe empties the disk (an operator wiping a node to rejoin it).
func (d *Disk) Wipe() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.gen++
	d.files, d.dfiles = map[string]*file{}, map[string]*file{}
	d.dirs, d.ddirs = map[string]bool{"/": true}, map[string]bool{"/": true}
	d.journal = nil
	d.locked = map[string]int{}
}

// procFS is the disk as one process sees it.
type procFS struct {
	d   *Disk
	gen int
}

var _ node.FS = (*procFS)(nil)

var errGone = errors.New("disk: the process that opened this is gone (crashed)")

// live checks, under d.mu, that the process is the current one.
func (p *procFS) live() error {
	if p.gen != p.d.gen {
		return errGone
	}
	return nil
}

func clean(path string) string { return filepath.Clean("/" + path) }

func (p *procFS) MkdirAll(dir string) error {
	d := p.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := p.live(); err != nil {
		return err
	}
	dir = clean(dir)
	var todo []string
	for q := dir; !d.dirs[q]; q = filepath.Dir(q) {
		if _, ok := d.files[q]; ok {
			return &fs.PathError{Op: "mkdir", Path: q, Err: syscall.ENOTDIR}
		}
		todo = append(todo, q)
	}
	for i := len(todo) - 1; i >= 0; i-- {
		d.logMeta(metaOp{kind: "mkdir", path: todo[i]})
	}
	return nil
}

func (p *procFS) Stat(path string) (fs.FileInfo, error) {
	d := p.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := p.live(); err != nil {
		return nil, err
	}
	path = clean(path)
	if d.dirs[path] {
		return info{name: filepath.Base(path), dir: true}, nil
	}
	if f, ok := d.files[path]; ok {
		return info{name: filepath.Base(path), size: int64(len(f.cur))}, nil
	}
	return nil, &fs.PathError{Op: "stat", Path: path, Err: fs.ErrNotExist}
}

func (p *procFS) ReadDir(dir string) ([]fs.DirEntry, error) {
	d := p.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := p.live(); err != nil {
		return nil, err
	}
	dir = clean(dir)
	if !d.dirs[dir] {
		return nil, &fs.PathError{Op: "readdir", Path: dir, Err: fs.ErrNotExist}
	}
	var out []fs.DirEntry
	for _, q := range sortedKeys(d.dirs) {
		if q != dir && filepath.Dir(q) == dir {
			out = append(out, fs.FileInfoToDirEntry(info{name: filepath.Base(q), dir: true}))
		}
	}
	for _, q := range sortedKeys(d.files) {
		if filepath.Dir(q) == dir {
			out = append(out, fs.FileInfoToDirEntry(info{name: filepath.Base(q), size: int64(len(d.files[q].cur))}))
		}
	}
	slices.SortFunc(out, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return out, nil
}

func (p *procFS) ReadFile(path string) ([]byte, error) {
	f, err := p.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	n, err := f.Size()
	if err != nil {
		return nil, err
	}
	b := make([]byte, n)
	if _, err := f.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return b, nil
}

func (p *procFS) OpenFile(path string, flag int, _ fs.FileMode) (node.File, error) {
	d := p.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := p.live(); err != nil {
		return nil, err
	}
	path = clean(path)
	if d.dirs[path] {
		if flag&(os.O_WRONLY|os.O_RDWR) != 0 {
			return nil, &fs.PathError{Op: "open", Path: path, Err: syscall.EISDIR}
		}
		return &handle{p: p, path: path, dir: true}, nil
	}
	f, ok := d.files[path]
	switch {
	case ok && flag&os.O_CREATE != 0 && flag&os.O_EXCL != 0:
		return nil, &fs.PathError{Op: "open", Path: path, Err: fs.ErrExist}
	case !ok && flag&os.O_CREATE == 0:
		return nil, &fs.PathError{Op: "open", Path: path, Err: fs.ErrNotExist}
	case !ok:
		if !d.dirs[filepath.Dir(path)] {
			return nil, &fs.PathError{Op: "open", Path: path, Err: fs.ErrNotExist}
		}
		f = &file{path: path}
		d.logMeta(metaOp{kind: "create", path: path, f: f})
	}
	h := &handle{p: p, path: path, f: f}
	if flag&os.O_TRUNC != 0 && len(f.cur) > 0 {
		h.truncLocked(0)
	}
	return h, nil
}

func (p *procFS) Remove(path string) error {
	d := p.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := p.live(); err != nil {
		return err
	}
	path = clean(path)
	_, isFile := d.files[path]
	if !isFile && !d.dirs[path] {
		return &fs.PathError{Op: "remove", Path: path, Err: fs.ErrNotExist}
	}
	if d.dirs[path] {
		for q := range d.files {
			if strings.HasPrefix(q, path+"/") {
				return &fs.PathError{Op: "remove", Path: path, Err: syscall.ENOTEMPTY}
			}
		}
	}
	d.logMeta(metaOp{kind: "remove", path: path})
	return nil
}

func (p *procFS) RemoveAll(path string) error {
	d := p.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := p.live(); err != nil {
		return err
	}
	path = clean(path)
	for _, q := range sortedKeys(d.files) {
		if q == path || strings.HasPrefix(q, path+"/") {
			d.logMeta(metaOp{kind: "remove", path: q})
		}
	}
	ds := sortedKeys(d.dirs)
	for i := len(ds) - 1; i >= 0; i-- {
		if q := ds[i]; q == path || strings.HasPrefix(q, path+"/") {
			d.logMeta(metaOp{kind: "remove", path: q})
		}
	}
	return nil
}

func (p *procFS) Rename(oldpath, newpath string) error {
	d := p.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := p.live(); err != nil {
		return err
	}
	oldpath, newpath = clean(oldpath), clean(newpath)
	_, isFile := d.files[oldpath]
	if !isFile && !d.dirs[oldpath] {
		return &fs.PathError{Op: "rename", Path: oldpath, Err: fs.ErrNotExist}
	}
	if !d.dirs[filepath.Dir(newpath)] {
		return &fs.PathError{Op: "rename", Path: newpath, Err: fs.ErrNotExist}
	}
	d.logMeta(metaOp{kind: "rename", path: oldpath, to: newpath})
	return nil
}

func (p *procFS) SyncDir(dir string) error {
	d := p.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := p.live(); err != nil {
		return err
	}
	if !d.dirs[clean(dir)] {
		return &fs.PathError{Op: "open", Path: dir, Err: fs.ErrNotExist}
	}
	return p.syncLocked(nil)
}

// syncLocked makes f's pending writes durable (none: a directory's sync)
// and commits the journal, unless the draw fails the sync.
func (p *procFS) syncLocked(f *file) error {
	d := p.d
	key, n := "dirsync", len(d.journal)
	if f != nil {
		f.ops++
		key, n = "sync:"+f.path, f.ops
	}
	if d.faults.SyncFail > 0 && d.draw(key, n).Float64() < d.faults.SyncFail {
		d.stats.SyncFailed++
		d.failedGen = d.gen + 1
		if f != nil && len(f.pending) > 0 && d.faults.SyncForget {
			f.pending = nil // written never, though the cache keeps them
			d.doomed = true
		}
		return syscall.EIO
	}
	if f != nil {
		for _, o := range f.pending {
			f.durable = o.apply(f.durable)
			f.written = o.writtenAfter(f.written)
		}
		f.pending = nil
	}
	d.commitLocked()
	return nil
}

func (p *procFS) Lock(dir string) (func() error, error) {
	d := p.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := p.live(); err != nil {
		return nil, err
	}
	dir = clean(dir)
	if _, held := d.locked[dir]; held {
		return nil, fmt.Errorf("node: data directory %s is in use by another fencelock server", dir)
	}
	d.locked[dir] = p.gen
	return func() error {
		d.mu.Lock()
		defer d.mu.Unlock()
		if g, ok := d.locked[dir]; ok && g == p.gen {
			delete(d.locked, dir)
		}
		return nil
	}, nil
}

// handle is an open file (or directory) of one process.
type handle struct {
	p      *procFS
	path   string
	f      *file
	dir    bool
	off    int64
	closed bool
}

var _ node.File = (*handle)(nil)

func (h *handle) check() error {
	if h.closed {
		return fs.ErrClosed
	}
	return h.p.live()
}

func (h *handle) Read(b []byte) (int, error) {
	n, err := h.ReadAt(b, h.off)
	h.off += int64(n)
	return n, err
}

func (h *handle) Write(b []byte) (int, error) {
	n, err := h.WriteAt(b, h.off)
	h.off += int64(n)
	return n, err
}

func (h *handle) ReadAt(b []byte, off int64) (int, error) {
	d := h.p.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := h.check(); err != nil {
		return 0, err
	}
	if h.dir {
		return 0, syscall.EISDIR
	}
	f := h.f
	if off >= int64(len(f.cur)) {
		return 0, io.EOF
	}
	n := copy(b, f.cur[off:])
	f.ops++
	if d.faults.Flip > 0 && n > 0 {
		if r := d.draw("read:"+f.path, f.ops); r.Float64() < d.faults.Flip {
			b[r.IntN(n)] ^= 1 << r.IntN(8)
			d.stats.Flipped++
		}
	}
	if n < len(b) {
		return n, io.EOF
	}
	return n, nil
}

func (h *handle) WriteAt(b []byte, off int64) (int, error) {
	d := h.p.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := h.check(); err != nil {
		return 0, err
	}
	if h.dir {
		return 0, syscall.EISDIR
	}
	f := h.f
	if err := d.room(off + int64(len(b)) - int64(len(f.cur))); err != nil {
		return 0, &fs.PathError{Op: "write", Path: h.path, Err: err}
	}
	o := op{off: off, data: slices.Clone(b)}
	f.cur = o.apply(f.cur)
	f.pending = append(f.pending, o)
	f.ops++
	return len(b), nil
}

// truncLocked cuts (or extends) the file to size.
func (h *handle) truncLocked(size int64) {
	o := op{trunc: true, size: size}
	h.f.cur = o.apply(h.f.cur)
	h.f.pending = append(h.f.pending, o)
	h.f.ops++
}

func (h *handle) Sync() error {
	d := h.p.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := h.check(); err != nil {
		return err
	}
	if h.dir {
		return h.p.syncLocked(nil)
	}
	return h.p.syncLocked(h.f)
}

func (h *handle) Size() (int64, error) {
	d := h.p.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := h.check(); err != nil {
		return 0, err
	}
	if h.dir {
		return 0, nil
	}
	return int64(len(h.f.cur)), nil
}

// Allocate extends the file with zeros to n bytes, at once on the
// medium too (fallocate is journaled with the file's size).
func (h *handle) Allocate(n int64) error {
	d := h.p.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := h.check(); err != nil {
		return err
	}
	f := h.f
	if h.dir || n <= int64(len(f.cur)) {
		return nil
	}
	if err := d.room(n - int64(len(f.cur))); err != nil {
		return err
	}
	f.cur = append(f.cur, make([]byte, n-int64(len(f.cur)))...)
	if int64(len(f.durable)) < n {
		f.durable = append(f.durable, make([]byte, n-int64(len(f.durable)))...)
	}
	return nil
}

func (h *handle) Close() error {
	d := h.p.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if h.closed {
		return fs.ErrClosed
	}
	h.closed = true
	return nil
}

// info is a file's or directory's fs.FileInfo.
type info struct {
	name string
	size int64
	dir  bool
}

func (i info) Name() string { return i.name }
func (i info) Size() int64  { return i.size }
func (i info) Mode() fs.FileMode {
	if i.dir {
		return fs.ModeDir | 0o700
	}
	return 0o600
}
func (i info) ModTime() time.Time { return time.Time{} }
func (i info) IsDir() bool        { return i.dir }
func (i info) Sys() any           { return nil }

// Damaged says whether the last power loss damaged what had been
// written: it rotted a bit, or the medium lacked writes a failed sync
// had dropped while the cache went on showing them (so a process could
// have read them back and built on them).
func (d *Disk) Damaged() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.damaged
}

// Doomed says whether a failed sync dropped writes since the last power
// loss (the next one damages the disk).
func (d *Disk) Doomed() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.doomed
}

// Faulty says whether the process running on the disk met a fault of
// it: a sync that failed, or a write that found no room (a writer may
// keep such an error, as the state file does).
func (d *Disk) Faulty() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.failedGen == d.gen+1
}

// Used is the bytes the process's files hold.
func (d *Disk) Used() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.used()
}
