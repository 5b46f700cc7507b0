package filefence

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The files:
//
//	marks      "fencelock filefence v2 gen G\n", one line per resource
//	           (fields below), "crc32c XXXXXXXX\n" over all before.
//	           Written whole (temporary file, fsync, rename), so it is
//	           either the old one or the new one.
//	marks.log  "fencelock filefence log gen G\n", then one line per raised
//	           mark: "XXXXXXXX " (the CRC-32C of the rest of the line) and
//	           the fields. Appended and fsynced one line at a time.
//
// The fields of a mark: highest, last write, the time it rose (Unix ms,
// 0 unknown), the resource and its lock key (Go-quoted), space-separated.
// A mark whose highest is 0 is a resource forgotten (Reset to 0). A log
// whose generation is below the snapshot's was compacted into it already;
// it is not read. Version 1 (a snapshot of "token resource" lines, no
// log) is read and rewritten as version 2 by the first Open.
const (
	headerV1  = "fencelock filefence v1"
	headerV2  = "fencelock filefence v2 gen "
	logHeader = "fencelock filefence log gen "

	// defaultCompactMin: a log shorter than this is never compacted, so a
	// fence of a few resources rewrites its snapshot rarely.
	defaultCompactMin = 4096
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// store is the marks as they are on disk, and the log being appended to.
type store struct {
	dir        string
	gen        uint64
	marks      map[string]Mark
	log        *os.File
	size       int64 // the log's length: every record in it is whole
	records    int   // records in the log
	broken     error // an append failed halfway and could not be undone
	compactMin int
}

func openStore(dir string, compactMin int) (*store, error) {
	s := &store{dir: dir, compactMin: compactMin}
	snap, err := readSnapshot(dir)
	if err != nil {
		return nil, err
	}
	s.gen, s.marks = snap.gen, snap.marks
	lg, err := readLog(dir)
	if err != nil {
		return nil, err
	}
	switch {
	case lg.missing || lg.gen < snap.gen || snap.v1:
		// No log of this snapshot: start one (after a compaction that
		// folds a version-1 file into version 2).
		if err := s.compact(); err != nil {
			return nil, fmt.Errorf("filefence: %w", err)
		}
		return s, nil
	case lg.gen > snap.gen:
		return nil, corrupt(filepath.Join(dir, LogName), fmt.Errorf("log of generation %d, but the snapshot is generation %d", lg.gen, snap.gen))
	}
	for _, m := range lg.records {
		apply(s.marks, m)
	}
	s.records = len(lg.records)
	f, err := os.OpenFile(filepath.Join(dir, LogName), os.O_WRONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("filefence: %w", err)
	}
	if lg.torn {
		// Cut the torn line off, so the next record starts a line.
		err := f.Truncate(lg.good)
		if err == nil {
			err = f.Sync()
		}
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("filefence: cutting a torn record off %s: %w", LogName, err)
		}
	}
	if _, err := f.Seek(lg.good, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("filefence: %w", err)
	}
	s.log, s.size = f, lg.good
	return s, nil
}

func apply(marks map[string]Mark, m Mark) {
	if m.Highest == 0 {
		delete(marks, m.Resource)
		return
	}
	marks[m.Resource] = m
}

// append records m: one line, fsynced, then a compaction if the log has
// grown past the marks it holds.
func (s *store) append(m Mark) error {
	if s.broken != nil {
		return s.broken
	}
	line := logLine(m)
	_, err := s.log.Write(line)
	if err == nil {
		err = s.log.Sync()
	}
	if err != nil {
		// Undo the part written, or the next record would continue it.
		if terr := s.log.Truncate(s.size); terr != nil {
			s.broken = fmt.Errorf("the log could not be cut back after a failed write (%v); reopen the fence", terr)
		} else if _, serr := s.log.Seek(s.size, io.SeekStart); serr != nil {
			s.broken = serr
		}
		return err
	}
	s.size += int64(len(line))
	apply(s.marks, m)
	s.records++
	if s.records >= max(s.compactMin, len(s.marks)) {
		// The record is durable whatever happens here; a compaction that
		// fails is tried again at the next append.
		_ = s.compact()
	}
	return nil
}

// compact writes every mark to a new snapshot and starts an empty log of
// its generation.
func (s *store) compact() error {
	next := s.gen + 1
	if err := writeFile(s.dir, FileName, encodeSnapshot(next, s.marks)); err != nil {
		return err
	}
	// From here the old log is no longer read (its generation is below
	// the snapshot's): a failure must stop appends to it.
	header := []byte(logHeader + strconv.FormatUint(next, 10) + "\n")
	err := writeFile(s.dir, LogName, header)
	var f *os.File
	if err == nil {
		f, err = os.OpenFile(filepath.Join(s.dir, LogName), os.O_WRONLY, 0)
	}
	if err == nil {
		_, err = f.Seek(int64(len(header)), io.SeekStart)
	}
	if err != nil {
		if f != nil {
			f.Close()
		}
		s.broken = fmt.Errorf("starting a new log after a compaction: %v; reopen the fence", err)
		return err
	}
	if s.log != nil {
		s.log.Close()
	}
	s.log, s.size, s.gen, s.records = f, int64(len(header)), next, 0
	return nil
}

func (s *store) close() error {
	if s.log == nil {
		return nil
	}
	return s.log.Close()
}

func fields(m Mark) string {
	var ms int64
	if !m.Raised.IsZero() {
		ms = m.Raised.UnixMilli()
	}
	return fmt.Sprintf("%d %d %d %s %s", m.Highest, m.LastWrite, ms, strconv.Quote(m.Resource), strconv.Quote(m.Key))
}

func logLine(m Mark) []byte {
	f := fields(m)
	return fmt.Appendf(nil, "%08x %s\n", crc32.Checksum([]byte(f), castagnoli), f)
}

func parseFields(s string) (Mark, error) {
	var m Mark
	var nums [3]uint64
	for i := range nums {
		tok, rest, ok := strings.Cut(s, " ")
		n, err := strconv.ParseUint(tok, 10, 64)
		if !ok || err != nil {
			return m, errors.New("bad number")
		}
		nums[i], s = n, rest
	}
	res, err := strconv.QuotedPrefix(s)
	if err != nil || len(s) == len(res) || s[len(res)] != ' ' {
		return m, errors.New("bad resource name")
	}
	key := s[len(res)+1:]
	if q, err := strconv.QuotedPrefix(key); err != nil || q != key {
		return m, errors.New("bad lock key")
	}
	m.Resource, _ = strconv.Unquote(res)
	m.Key, _ = strconv.Unquote(key)
	m.Highest, m.LastWrite = nums[0], nums[1]
	if nums[2] != 0 {
		m.Raised = time.UnixMilli(int64(nums[2]))
	}
	if m.LastWrite > m.Highest {
		return m, errors.New("last write above the highest token")
	}
	return m, nil
}

func encodeSnapshot(gen uint64, marks map[string]Mark) []byte {
	names := make([]string, 0, len(marks))
	for k := range marks {
		names = append(names, k)
	}
	sort.Strings(names)
	var b bytes.Buffer
	b.WriteString(headerV2 + strconv.FormatUint(gen, 10) + "\n")
	for _, k := range names {
		b.WriteString(fields(marks[k]))
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "crc32c %08x\n", crc32.Checksum(b.Bytes(), castagnoli))
	return b.Bytes()
}

// writeFile replaces DIR/name atomically and durably.
func writeFile(dir, name string, data []byte) error {
	tmp, err := os.CreateTemp(dir, name+".tmp-*")
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
	if err := os.Rename(tmp.Name(), filepath.Join(dir, name)); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func corrupt(path string, err error) error {
	return fmt.Errorf("%w: %s: %v (refusing to start with no marks: that would let stale tokens back in; restore the file, or remove it deliberately)", ErrCorrupt, path, err)
}

type snapshot struct {
	gen   uint64
	v1    bool
	marks map[string]Mark
}

func readSnapshot(dir string) (snapshot, error) {
	path := filepath.Join(dir, FileName)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return snapshot{marks: map[string]Mark{}}, nil
	}
	if err != nil {
		return snapshot{}, fmt.Errorf("filefence: %w", err)
	}
	s, err := decodeSnapshot(data)
	if err != nil {
		return snapshot{}, corrupt(path, err)
	}
	return s, nil
}

func decodeSnapshot(data []byte) (snapshot, error) {
	s := snapshot{marks: map[string]Mark{}}
	i := bytes.LastIndex(bytes.TrimSuffix(data, []byte("\n")), []byte("\n"))
	if i < 0 || !bytes.HasSuffix(data, []byte("\n")) {
		return s, errors.New("no checksum line (truncated?)")
	}
	body, trailer := data[:i+1], strings.TrimSpace(string(data[i+1:]))
	var sum uint32
	if _, err := fmt.Sscanf(trailer, "crc32c %08x", &sum); err != nil {
		return s, fmt.Errorf("bad checksum line %q (truncated?)", trailer)
	}
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return s, fmt.Errorf("checksum %08x, file says %08x", got, sum)
	}
	lines := strings.Split(strings.TrimSuffix(string(body), "\n"), "\n")
	switch {
	case lines[0] == headerV1:
		s.v1 = true
	case strings.HasPrefix(lines[0], headerV2):
		g, err := strconv.ParseUint(strings.TrimPrefix(lines[0], headerV2), 10, 64)
		if err != nil {
			return s, fmt.Errorf("bad generation in %q", lines[0])
		}
		s.gen = g
	default:
		return s, fmt.Errorf("first line %q is not a filefence header", lines[0])
	}
	for n, line := range lines[1:] {
		var m Mark
		if s.v1 {
			tok, quoted, ok := strings.Cut(line, " ")
			t, err := strconv.ParseUint(tok, 10, 64)
			name, qerr := strconv.Unquote(quoted)
			if !ok || err != nil || t == 0 || qerr != nil {
				return s, fmt.Errorf("line %d: bad mark", n+2)
			}
			m = Mark{Resource: name, Highest: t, LastWrite: t}
		} else {
			var err error
			if m, err = parseFields(line); err != nil || m.Highest == 0 {
				return s, fmt.Errorf("line %d: bad mark", n+2)
			}
		}
		s.marks[m.Resource] = m
	}
	return s, nil
}

type logFile struct {
	missing bool
	gen     uint64
	records []Mark
	good    int64 // bytes up to the end of the last whole record
	torn    bool  // a last line without its newline follows good
}

func readLog(dir string) (logFile, error) {
	path := filepath.Join(dir, LogName)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return logFile{missing: true}, nil
	}
	if err != nil {
		return logFile{}, fmt.Errorf("filefence: %w", err)
	}
	lg, err := decodeLog(data)
	if err != nil {
		return logFile{}, corrupt(path, err)
	}
	return lg, nil
}

func decodeLog(data []byte) (logFile, error) {
	var lg logFile
	end := bytes.IndexByte(data, '\n')
	if end < 0 || !strings.HasPrefix(string(data[:end]), logHeader) {
		// The header is written whole, with the file, before it is
		// renamed into place: without it the file is not a torn append.
		return lg, errors.New("no log header")
	}
	g, err := strconv.ParseUint(string(data[len(logHeader):end]), 10, 64)
	if err != nil {
		return lg, errors.New("bad generation in the log header")
	}
	lg.gen = g
	off := end + 1
	for n := 2; off < len(data); n++ {
		nl := bytes.IndexByte(data[off:], '\n')
		if nl < 0 {
			lg.torn = true
			break
		}
		line := string(data[off : off+nl])
		sum, rest, ok := strings.Cut(line, " ")
		want, err := strconv.ParseUint(sum, 16, 32)
		if !ok || err != nil || len(sum) != 8 || uint32(want) != crc32.Checksum([]byte(rest), castagnoli) {
			return lg, fmt.Errorf("record %d (line %d) fails its checksum", n-1, n)
		}
		m, err := parseFields(rest)
		if err != nil {
			return lg, fmt.Errorf("record %d (line %d): %v", n-1, n, err)
		}
		lg.records = append(lg.records, m)
		off += nl + 1
	}
	lg.good = int64(off)
	return lg, nil
}

// ReadMarks lists the marks in dir, sorted by resource, without taking
// the directory: it works while the process that owns it runs (a mark
// being appended at that instant may be missed).
func ReadMarks(dir string) ([]Mark, error) {
	for range 5 {
		snap, err := readSnapshot(dir)
		if err != nil {
			return nil, err
		}
		lg, err := readLog(dir)
		if err != nil {
			return nil, err
		}
		if !lg.missing && lg.gen > snap.gen {
			continue // compacted between the two reads: read again
		}
		if !lg.missing && lg.gen == snap.gen && !snap.v1 {
			for _, m := range lg.records {
				apply(snap.marks, m)
			}
		}
		return sorted(snap.marks), nil
	}
	return nil, errors.New("filefence: the marks kept changing while they were read; try again")
}

func sorted(marks map[string]Mark) []Mark {
	out := make([]Mark, 0, len(marks))
	for _, m := range marks {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Resource < out[j].Resource })
	return out
}

func crc32Checksum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }
