// Package callcodec is the binary encoding of the hot calls — acquire,
// extend, release and check — that a framed connection (internal/framing)
// carries instead of their JSON when both ends speak it. It encodes the
// same api types the JSON API does, field for field, so the service sees
// the same request either way; only a successful answer is binary, an
// error answer stays the API's JSON error.
//
// Encoding: the fields of the api type in a fixed order, nothing else.
// A string is its length as a uvarint and its bytes, which must be UTF-8
// (a client with a string that is not sends JSON instead, so that both
// ways read it the same); an unsigned integer is a uvarint, a signed one a
// zigzag varint, a bool one byte 0 or 1, a list its length and its items.
// A decoder refuses a short body, trailing bytes and out-of-range values:
// a field added later makes an older server refuse the call rather than
// ignore the field, as the JSON API refuses unknown fields.
package callcodec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"unicode/utf8"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/binread"
)

// Error is a body that does not decode. Field names the first field that
// could not be read, by its JSON name.
type Error struct {
	Field string
	Msg   string
}

func (e *Error) Error() string { return e.Field + ": " + e.Msg }

// MaxHolders bounds the holders a lease answer may list (a semaphore's
// permits are bounded far lower by the API; this only bounds a decoder).
const MaxHolders = 1 << 16

// ValidStrings reports whether every string is UTF-8, which the encoding
// requires of them all.
func ValidStrings(ss ...string) bool {
	for _, s := range ss {
		if !utf8.ValidString(s) {
			return false
		}
	}
	return true
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

func appendBool(dst []byte, b bool) []byte {
	if b {
		return append(dst, 1)
	}
	return append(dst, 0)
}

// reader decodes one body. The first failure sticks; field is the field
// being read when it did, which the failures of binread do not know.
type reader struct {
	binread.Reader
	field string
}

func newReader(b []byte) reader { return reader{Reader: binread.New(b)} }

// at notes that the next read is of field, unless a read has failed.
func (r *reader) at(field string) {
	if r.Err() == nil {
		r.field = field
	}
}

func (r *reader) fail(field, format string, args ...any) {
	r.Fail(&Error{Field: field, Msg: fmt.Sprintf(format, args...)})
}

func (r *reader) uvarint(field string) uint64 {
	r.at(field)
	return r.Uvarint()
}

func (r *reader) varint(field string) int64 {
	r.at(field)
	return r.Varint()
}

func (r *reader) int(field string) int {
	v := r.varint(field)
	if v < math.MinInt || v > math.MaxInt {
		r.fail(field, "%s must be an integer in range", field)
		return 0
	}
	return int(v)
}

func (r *reader) str(field string) string {
	r.at(field)
	s := r.String(math.MaxInt)
	if r.Err() == nil && !utf8.ValidString(s) {
		r.fail(field, "%s must be UTF-8", field)
		return ""
	}
	return s
}

func (r *reader) bool(field string) bool {
	if r.Err() == nil && (r.Len() == 0 || r.Rest()[0] > 1) {
		r.fail(field, "%s must be a byte 0 or 1", field)
		return false
	}
	return r.Byte() == 1
}

// done is the decoder's error: its first failure, or trailing bytes, as an
// *Error that names the field at fault.
func (r *reader) done() error {
	if r.Err() == nil {
		if r.Len() == 0 {
			return nil
		}
		r.fail("body", "%d bytes after the last field", r.Len())
	}
	return r.failure()
}

// failure is done's error once a read failed. It is apart from done so
// that the targets errors.As needs, which move to the heap, cost nothing
// to a body that decodes.
func (r *reader) failure() error {
	var (
		e  *Error
		le *binread.LengthError
	)
	switch err := r.Err(); {
	case errors.As(err, &e):
		return e
	case errors.Is(err, binread.ErrUvarint), errors.Is(err, binread.ErrVarint):
		return &Error{Field: r.field, Msg: "body ends or overflows in " + r.field}
	case errors.As(err, &le):
		return &Error{Field: r.field, Msg: r.field + " runs past the body"}
	default:
		return &Error{Field: r.field, Msg: err.Error()}
	}
}

// AppendAcquire appends the encoding of an acquire request.
func AppendAcquire(dst []byte, q api.AcquireRequest) []byte {
	dst = appendString(dst, q.Key)
	dst = appendString(dst, q.Holder)
	dst = binary.AppendVarint(dst, q.TTLMs)
	dst = binary.AppendVarint(dst, q.WaitMs)
	dst = appendString(dst, q.RequestID)
	dst = binary.AppendUvarint(dst, q.Session)
	dst = binary.AppendVarint(dst, q.LockDelayMs)
	dst = binary.AppendVarint(dst, int64(q.Permits))
	return appendString(dst, q.Mode)
}

// Acquire decodes an acquire request.
func Acquire(b []byte) (api.AcquireRequest, error) {
	r := newReader(b)
	q := api.AcquireRequest{
		Key:         r.str("key"),
		Holder:      r.str("holder"),
		TTLMs:       r.varint("ttl_ms"),
		WaitMs:      r.varint("wait_ms"),
		RequestID:   r.str("request_id"),
		Session:     r.uvarint("session"),
		LockDelayMs: r.varint("lock_delay_ms"),
		Permits:     r.int("permits"),
		Mode:        r.str("mode"),
	}
	return q, r.done()
}

// AppendExtend appends the encoding of an extend request.
func AppendExtend(dst []byte, q api.ExtendRequest) []byte {
	dst = appendString(dst, q.Key)
	dst = appendString(dst, q.Holder)
	dst = binary.AppendUvarint(dst, q.Token)
	dst = binary.AppendVarint(dst, q.TTLMs)
	return appendString(dst, q.RequestID)
}

// Extend decodes an extend request.
func Extend(b []byte) (api.ExtendRequest, error) {
	r := newReader(b)
	q := api.ExtendRequest{
		Key:       r.str("key"),
		Holder:    r.str("holder"),
		Token:     r.uvarint("token"),
		TTLMs:     r.varint("ttl_ms"),
		RequestID: r.str("request_id"),
	}
	return q, r.done()
}

// AppendRelease appends the encoding of a release request.
func AppendRelease(dst []byte, q api.ReleaseRequest) []byte {
	dst = appendString(dst, q.Key)
	dst = appendString(dst, q.Holder)
	dst = binary.AppendUvarint(dst, q.Token)
	return appendString(dst, q.RequestID)
}

// Release decodes a release request.
func Release(b []byte) (api.ReleaseRequest, error) {
	r := newReader(b)
	q := api.ReleaseRequest{
		Key:       r.str("key"),
		Holder:    r.str("holder"),
		Token:     r.uvarint("token"),
		RequestID: r.str("request_id"),
	}
	return q, r.done()
}

// CheckRequest is a check's query (GET /v1/check?key=K&token=T) as a body.
type CheckRequest struct {
	Key   string
	Token uint64
}

// AppendCheck appends the encoding of a check.
func AppendCheck(dst []byte, q CheckRequest) []byte {
	dst = appendString(dst, q.Key)
	return binary.AppendUvarint(dst, q.Token)
}

// Check decodes a check.
func Check(b []byte) (CheckRequest, error) {
	r := newReader(b)
	q := CheckRequest{Key: r.str("key"), Token: r.uvarint("token")}
	return q, r.done()
}

// AppendLease appends the encoding of a lease, the answer of acquire and
// extend.
func AppendLease(dst []byte, l api.Lease) []byte {
	dst = appendString(dst, l.Key)
	dst = appendString(dst, l.Holder)
	dst = binary.AppendUvarint(dst, l.Token)
	dst = binary.AppendVarint(dst, l.TTLMs)
	dst = binary.AppendVarint(dst, l.RemainingMs)
	dst = binary.AppendUvarint(dst, l.Session)
	dst = appendString(dst, l.Kind)
	dst = binary.AppendVarint(dst, int64(l.Permits))
	dst = appendString(dst, l.Mode)
	dst = binary.AppendVarint(dst, int64(l.Slot))
	dst = binary.AppendUvarint(dst, uint64(len(l.Holders)))
	for _, h := range l.Holders {
		dst = AppendLease(dst, h)
	}
	return dst
}

// Lease decodes a lease.
func Lease(b []byte) (api.Lease, error) {
	r := newReader(b)
	l := r.lease(0)
	return l, r.done()
}

// maxDepth bounds the nesting of holders: a lease's holders list no
// holders of their own, so one level is all an answer has.
const maxDepth = 1

func (r *reader) lease(depth int) api.Lease {
	l := api.Lease{
		Key:         r.str("key"),
		Holder:      r.str("holder"),
		Token:       r.uvarint("token"),
		TTLMs:       r.varint("ttl_ms"),
		RemainingMs: r.varint("remaining_ms"),
		Session:     r.uvarint("session"),
		Kind:        r.str("kind"),
		Permits:     r.int("permits"),
		Mode:        r.str("mode"),
		Slot:        r.int("slot"),
	}
	n := r.uvarint("holders")
	switch {
	case r.Err() != nil || n == 0:
		return l
	case n > MaxHolders || depth >= maxDepth:
		r.fail("holders", "%d holders nested %d deep; at most %d, one level", n, depth+1, MaxHolders)
		return l
	case n > uint64(r.Len()):
		// Every holder takes at least a byte: a count past the body's
		// length cannot be honest, and must not size an allocation.
		r.fail("holders", "holders runs past the body")
		return l
	}
	l.Holders = make([]api.Lease, 0, n)
	for i := uint64(0); i < n && r.Err() == nil; i++ {
		l.Holders = append(l.Holders, r.lease(depth+1))
	}
	return l
}

// AppendReleased appends the encoding of a release's answer.
func AppendReleased(dst []byte, a api.ReleaseResponse) []byte {
	return appendBool(dst, a.Released)
}

// Released decodes a release's answer.
func Released(b []byte) (api.ReleaseResponse, error) {
	r := newReader(b)
	a := api.ReleaseResponse{Released: r.bool("released")}
	return a, r.done()
}

// AppendChecked appends the encoding of a check's answer.
func AppendChecked(dst []byte, a api.CheckResponse) []byte {
	dst = appendString(dst, a.Key)
	dst = binary.AppendUvarint(dst, a.Token)
	return appendBool(dst, a.Valid)
}

// Checked decodes a check's answer.
func Checked(b []byte) (api.CheckResponse, error) {
	r := newReader(b)
	a := api.CheckResponse{Key: r.str("key"), Token: r.uvarint("token"), Valid: r.bool("valid")}
	return a, r.done()
}

// AppendRequest appends the encoding of req, an api.AcquireRequest,
// api.ExtendRequest, api.ReleaseRequest or CheckRequest; ok is false for
// any other type.
func AppendRequest(dst []byte, req any) (out []byte, ok bool) {
	switch q := req.(type) {
	case api.AcquireRequest:
		return AppendAcquire(dst, q), true
	case api.ExtendRequest:
		return AppendExtend(dst, q), true
	case api.ReleaseRequest:
		return AppendRelease(dst, q), true
	case CheckRequest:
		return AppendCheck(dst, q), true
	}
	return dst, false
}

// DecodeAnswer decodes an answer into out: an *api.Lease,
// *api.ReleaseResponse or *api.CheckResponse (nil: the answer is not
// wanted).
func DecodeAnswer(b []byte, out any) error {
	var err error
	switch o := out.(type) {
	case nil:
	case *api.Lease:
		*o, err = Lease(b)
	case *api.ReleaseResponse:
		*o, err = Released(b)
	case *api.CheckResponse:
		*o, err = Checked(b)
	default:
		err = fmt.Errorf("callcodec: no binary answer is a %T", out)
	}
	return err
}
