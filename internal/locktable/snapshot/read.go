package snapshot

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/fencelock/fencelock/internal/binread"
)

// Limits bound the strings of a snapshot.
type Limits struct {
	Key    int // bytes of a key
	Holder int // bytes of a holder's name
}

// Restore receives the records of a snapshot as Read finds them, and says
// with an error that one cannot be restored. Read wraps an entry's error
// with the entry's place.
type Restore struct {
	// Header comes first, with the number of entries that follow
	// (bounded by the snapshot's size).
	Header func(h Header, entries int) error
	// Entry comes once per entry, in increasing key order. The Entry and
	// its Waiters are Read's, reused for the next: copy what is kept.
	Entry func(e *Entry) error
}

// Read checks data's length, checksum and version, passes its header and
// entries to r, and returns its sections in increasing tag order. Every
// error is either r's or a fault of the format; the caller says which
// snapshot was corrupt.
func Read(data []byte, lim Limits, r Restore) ([]Section, error) {
	if len(data) < len(MagicV2)+4 {
		return nil, fmt.Errorf("%d bytes is too short", len(data))
	}
	body, sum := data[:len(data)-4], binary.LittleEndian.Uint32(data[len(data)-4:])
	if got := crc32.ChecksumIEEE(body); got != sum {
		return nil, fmt.Errorf("checksum %08x, want %08x", got, sum)
	}
	rd := &reader{Reader: binread.New(body[len(MagicV2):]), lim: lim, r: r}
	var err error
	var sections []Section
	switch string(body[:len(MagicV2)]) {
	case MagicV1:
		err = rd.v1()
	case MagicV2:
		err = rd.v2()
	case MagicV3:
		if err = rd.v2(); err == nil {
			sections, err = rd.sections()
		}
	default:
		return nil, fmt.Errorf("unknown format %q", body[:len(MagicV2)])
	}
	if err != nil {
		return nil, err
	}
	if rd.Len() != 0 {
		return nil, fmt.Errorf("%d trailing bytes", rd.Len())
	}
	return sections, nil
}

type reader struct {
	binread.Reader
	lim Limits
	r   Restore
	e   Entry // the record handed to r.Entry, reused
}

// header reads the last token and the clock.
func (d *reader) header() Header { return Header{Last: d.Uvarint(), MaxNow: d.Varint()} }

// count reads how many entries follow, each at least 3 bytes, which bounds
// it before the restorer allocates for them, and passes the header on.
func (d *reader) count(h Header) (uint64, error) {
	n := d.Uvarint()
	if d.Err() == nil && n > uint64(d.Len())/3 {
		return 0, fmt.Errorf("%d entries cannot fit in %d bytes", n, d.Len())
	}
	if err := d.Err(); err != nil {
		return 0, err
	}
	return n, d.r.Header(h, int(n))
}

// entry hands the entry read to the restorer, wrapping its refusal.
func (d *reader) entry(i uint64) error {
	if err := d.r.Entry(&d.e); err != nil {
		return fmt.Errorf("entry %d: %w", i, err)
	}
	return nil
}

func (d *reader) v1() error {
	n, err := d.count(d.header())
	if err != nil {
		return err
	}
	prev := ""
	for i := uint64(0); i < n && d.Err() == nil; i++ {
		e := &d.e
		*e = Entry{Key: d.String(d.lim.Key), Waiters: e.Waiters[:0]}
		if d.Err() != nil {
			break
		}
		if i > 0 && e.Key <= prev {
			return fmt.Errorf("entry %d: keys out of order", i)
		}
		prev = e.Key
		switch d.Byte() {
		case 0:
		case 1:
			e.Held = true
			e.Lease = Lease{Holder: d.String(d.lim.Holder), Token: d.Uvarint(), Granted: d.Varint(), Expiry: d.Varint(), TTL: d.Varint()}
		default:
			return fmt.Errorf("entry %d: bad lease flag", i)
		}
		nw := d.Uvarint()
		if d.Err() == nil && nw > uint64(d.Len())/4 {
			return fmt.Errorf("entry %d: %d waiters cannot fit", i, nw)
		}
		for j := uint64(0); j < nw && d.Err() == nil; j++ {
			e.Waiters = append(e.Waiters, Waiter{Holder: d.String(d.lim.Holder), TTL: d.Varint(), Since: d.Varint(), Deadline: d.Varint()})
		}
		if d.Err() != nil {
			break
		}
		if err := d.entry(i); err != nil {
			return err
		}
	}
	return d.Err()
}

func (d *reader) v2() error {
	h := d.header()
	nh := d.Uvarint()
	// Each name takes at least 2 bytes: that bounds what is allocated
	// before reading them.
	if d.Err() == nil && nh > uint64(d.Len())/2 {
		return fmt.Errorf("%d holders cannot fit in %d bytes", nh, d.Len())
	}
	names := make([]string, 0, nh)
	seen := make(map[string]bool, nh)
	for i := uint64(0); i < nh && d.Err() == nil; i++ {
		name := d.String(d.lim.Holder)
		if d.Err() != nil {
			break
		}
		if name == "" || seen[name] {
			return fmt.Errorf("bad holder %d", i)
		}
		seen[name] = true
		names = append(names, name)
	}
	holder := func() (string, bool) {
		i := d.Uvarint()
		if d.Err() != nil || i >= uint64(len(names)) {
			return "", false
		}
		return names[i], true
	}
	n, err := d.count(h)
	if err != nil {
		return err
	}
	prev := ""
	var prevTTL int64
	var kb []byte
	for i := uint64(0); i < n && d.Err() == nil; i++ {
		shared := d.Uvarint()
		suffix := d.Bytes(d.lim.Key)
		flags := d.Byte()
		if d.Err() != nil {
			break
		}
		if shared > uint64(len(prev)) || flags&^flagsKnown != 0 || (flags&flagHeld == 0 && flags&(flagSameTTL|flagPlainLease) != 0) {
			return fmt.Errorf("entry %d: bad key prefix or flags", i)
		}
		kb = append(append(kb[:0], prev[:shared]...), suffix...)
		e := &d.e
		*e = Entry{Key: string(kb), Waiters: e.Waiters[:0]}
		if i > 0 && e.Key <= prev {
			return fmt.Errorf("entry %d: keys out of order", i)
		}
		prev = e.Key
		if flags&flagHeld != 0 {
			name, ok := holder()
			l := Lease{Holder: name, Token: d.Uvarint(), Granted: h.MaxNow - d.Varint(), TTL: prevTTL}
			if flags&flagSameTTL == 0 {
				l.TTL = d.Varint()
			}
			l.Expiry = l.Granted + l.TTL
			if flags&flagPlainLease == 0 {
				l.Expiry += d.Varint()
			}
			if d.Err() != nil {
				break
			}
			if !ok {
				return fmt.Errorf("entry %d: bad holder", i)
			}
			e.Held, e.Lease, prevTTL = true, l, l.TTL
		}
		if flags&flagWaiters != 0 {
			nw := d.Uvarint()
			if d.Err() == nil && (nw == 0 || nw > uint64(d.Len())/4) {
				return fmt.Errorf("entry %d: %d waiters", i, nw)
			}
			for j := uint64(0); j < nw && d.Err() == nil; j++ {
				name, ok := holder()
				w := Waiter{Holder: name, TTL: d.Varint(), Since: d.Varint(), Deadline: d.Varint()}
				if d.Err() == nil && !ok {
					return fmt.Errorf("entry %d: bad waiter %d", i, j)
				}
				e.Waiters = append(e.Waiters, w)
			}
		}
		if d.Err() != nil {
			break
		}
		if err := d.entry(i); err != nil {
			return err
		}
	}
	return d.Err()
}

// sections reads the sections that follow the entries, to the end.
func (d *reader) sections() ([]Section, error) {
	var out []Section
	var last byte // tags start at 1
	for d.Len() > 0 && d.Err() == nil {
		tag := d.Byte()
		payload := d.Bytes(d.Len())
		if d.Err() != nil {
			break
		}
		if tag <= last || len(payload) == 0 {
			return nil, fmt.Errorf("section %d after %d, or empty", tag, last)
		}
		last = tag
		out = append(out, Section{Tag: tag, Payload: payload})
	}
	if err := d.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, errors.New("version 3 without sections")
	}
	return out, nil
}

// Payload reads a section's payload, for the section's owner.
type Payload struct{ binread.Reader }

// NewPayload returns a Payload of p.
func NewPayload(p []byte) *Payload { return &Payload{binread.New(p)} }

// End is the payload's error once it is read: the first failure, or bytes
// left after its last field.
func (p *Payload) End() error {
	if err := p.Err(); err != nil {
		return err
	}
	if p.Len() != 0 {
		return fmt.Errorf("%d trailing bytes", p.Len())
	}
	return nil
}
