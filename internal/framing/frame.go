// Package framing carries the HTTP API over one long-lived TCP connection
// as length-prefixed binary frames, with many requests in flight at once
// and answers in whatever order they are ready.
//
// It exists for speed: a lock server's requests are tiny, so HTTP/1.1's
// text headers and one-request-per-connection-at-a-time cost more than the
// lock operation itself. A framed connection reads and writes many requests
// per system call. The requests and answers are those of the HTTP API
// (docs/API.md) — same paths, same JSON bodies, same status codes — and the
// server answers them with the same http.Handler, so the two ways in cannot
// drift apart: this package is an adapter over the server's HTTP adapter,
// which is itself one over the server's typed operations
// (internal/server).
//
// A framed connection begins with the client sending Preface, which starts
// with a NUL byte and so can never begin an HTTP request; the server echoes
// it. One port serves both: Listen sorts each accepted connection by its
// first byte.
//
// Frames, all integers big-endian:
//
//	request:  length u32 | id u32 | kind u8 | method u8 | target length u16 | target | body
//	answer:   length u32 | id u32 | status u16 | body
//
// length counts the bytes after itself. target is the path with an
// optional "?query". kind is KindRequest, KindCancel or KindAuth (a
// connection's credential, sent once before its requests); a cancel frame
// carries the id of an earlier request whose caller stopped waiting, and
// ends that request's context on the server, as closing an HTTP connection
// would. A request that was cancelled may still be answered; the client
// drops answers to ids it no longer waits for.
//
// The hot calls may skip HTTP altogether: a server with a CallHandler
// lists, in its answer to CallsTarget, the paths it takes as binary calls
// (MethodCall, bodies encoded by internal/callcodec), and its handler
// answers them without an http.Request.
package framing

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/fencelock/fencelock/api"
)

// Preface opens every framed connection, from the client and back.
const Preface = "\x00FLP/1\r\n"

// Frame kinds.
const (
	KindRequest byte = 1
	KindCancel  byte = 2
	// KindAuth carries, as its body, the credential (an Authorization
	// header value, "Bearer …") that every later request of the
	// connection is served with. Method 0, no target, no answer.
	KindAuth byte = 3
)

// maxCredential bounds an auth frame's body.
const maxCredential = 4096

// Methods: the API uses two; MethodCall is a hot call in binary.
const (
	methodGet  byte = 1
	methodPost byte = 2
	methodCall byte = 3
)

// MethodCall is the method of a request whose body is the binary encoding
// (internal/callcodec) of the call its path names, and whose answer, when
// its status is 200, is the binary encoding of the call's answer; any
// other answer is the API's JSON error. A client sends it only on a
// connection whose server listed the path in its answer to CallsTarget
// (Conn.Calls), so an older server never sees one.
const MethodCall = "CALL"

// CallsTarget is what a client asks, as request id 0 right after the
// preface, to learn which paths the server answers as binary calls: a
// server that has a CallHandler answers 200 with one path per line, any
// other (an older one) answers it as an unknown path, 404.
const CallsTarget = "/_frames/calls"

// MaxFrame bounds one frame's length field. It is the HTTP API's largest
// request body (64 KiB) or answer (a page of 1000 leases, about 1.3 MiB)
// with room to spare.
const MaxFrame = 4 << 20

const (
	requestHeader = 4 + 4 + 1 + 1 + 2 // length, id, kind, method, target length
	answerHeader  = 4 + 4 + 2         // length, id, status
	maxTarget     = 1<<16 - 1
)

// MaxRequestFrame bounds a request frame's length field: the largest
// target and the API's largest body (api.MaxBodyBytes). A server refuses
// a longer one at its length, before it holds a byte of it, and a client
// never sends one.
const MaxRequestFrame = requestHeader - 4 + maxTarget + api.MaxBodyBytes

// ErrFrame is a malformed or oversized frame; the connection that sent it
// is closed.
var ErrFrame = errors.New("framing: malformed frame")

func methodCode(m string) (byte, error) {
	switch m {
	case http.MethodGet:
		return methodGet, nil
	case http.MethodPost:
		return methodPost, nil
	case MethodCall:
		return methodCall, nil
	}
	return 0, fmt.Errorf("framing: method %q is not carried (GET, POST and CALL are)", m)
}

func methodName(c byte) (string, bool) {
	switch c {
	case methodGet:
		return http.MethodGet, true
	case methodPost:
		return http.MethodPost, true
	case methodCall:
		return MethodCall, true
	}
	return "", false
}

// request is one decoded request or cancel frame.
type request struct {
	id     uint32
	kind   byte
	method string
	target string
	body   []byte
}

// checkRequest says whether a request fits in a frame.
func checkRequest(target string, body []byte) error {
	if len(target) > maxTarget {
		return fmt.Errorf("framing: target of %d bytes is longer than %d", len(target), maxTarget)
	}
	if n := requestHeader - 4 + len(target) + len(body); n > MaxRequestFrame {
		return fmt.Errorf("framing: request of %d bytes is larger than %d", n, MaxRequestFrame)
	}
	return nil
}

// appendRequest appends a request frame to dst.
func appendRequest(dst []byte, id uint32, kind, method byte, target string, body []byte) ([]byte, error) {
	if err := checkRequest(target, body); err != nil {
		return dst, err
	}
	n := requestHeader - 4 + len(target) + len(body)
	dst = binary.BigEndian.AppendUint32(dst, uint32(n))
	dst = binary.BigEndian.AppendUint32(dst, id)
	dst = append(dst, kind, method)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(target)))
	dst = append(dst, target...)
	return append(dst, body...), nil
}

// appendAnswer appends an answer frame to dst. The caller keeps body
// under MaxFrame.
func appendAnswer(dst []byte, id uint32, status int, body []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(answerHeader-4+len(body)))
	dst = binary.BigEndian.AppendUint32(dst, id)
	dst = binary.BigEndian.AppendUint16(dst, uint16(status))
	return append(dst, body...)
}

// readFrame reads one length-prefixed frame of at most MaxFrame bytes
// into a new slice (the bytes after the length).
func readFrame(r io.Reader, least int) ([]byte, error) {
	return readFrameThen(r, least, MaxFrame, nil)
}

// eagerFrame is the largest frame whose buffer is allocated at its
// declared length; a longer one grows as its bytes arrive.
const eagerFrame = 64 << 10

// errTooLarge is a frame whose length is over the reader's limit.
var errTooLarge = fmt.Errorf("%w: frame over its limit", ErrFrame)

// frameHooks are told of a frame's progress (the server's deadlines and
// buffer accounting); either may be nil.
type frameHooks struct {
	// began runs once the length has been read and found within the
	// limit; an error ends the read.
	began func(n int) error
	// progress runs after each read that returned bytes of the frame.
	progress func()
}

// readFrameThen is readFrame with a limit of its own and hooks. The
// buffer is allocated at the declared length only up to eagerFrame and
// grows from there as bytes arrive, at most doubling each time: a peer
// that declares 4 MiB and sends ten bytes costs 64 KiB, not 4 MiB.
func readFrameThen(r io.Reader, least, limit int, h *frameHooks) ([]byte, error) {
	var lb [4]byte
	if _, err := io.ReadFull(r, lb[:]); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint32(lb[:]))
	if n > limit {
		return nil, fmt.Errorf("%w: length %d, the limit is %d", errTooLarge, n, limit)
	}
	if n < least {
		return nil, fmt.Errorf("%w: length %d", ErrFrame, n)
	}
	if h != nil && h.began != nil {
		if err := h.began(n); err != nil {
			return nil, err
		}
	}
	buf := make([]byte, 0, min(n, eagerFrame))
	for len(buf) < n {
		if len(buf) == cap(buf) {
			grown := make([]byte, len(buf), len(buf)+min(cap(buf), n-len(buf)))
			copy(grown, buf)
			buf = grown
		}
		m, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+m]
		if m > 0 && h != nil && h.progress != nil {
			h.progress()
		}
		if err != nil && len(buf) < n {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	return buf, nil
}

// readRequest reads and decodes one request or cancel frame.
func readRequest(r io.Reader) (request, error) {
	buf, err := readFrame(r, requestHeader-4)
	if err != nil {
		return request{}, err
	}
	return parseRequest(buf)
}

func parseRequest(buf []byte) (request, error) {
	if len(buf) < requestHeader-4 {
		return request{}, fmt.Errorf("%w: short request", ErrFrame)
	}
	q := request{id: binary.BigEndian.Uint32(buf), kind: buf[4]}
	tl := int(binary.BigEndian.Uint16(buf[6:]))
	rest := buf[requestHeader-4:]
	if tl > len(rest) {
		return request{}, fmt.Errorf("%w: target runs past the frame", ErrFrame)
	}
	switch q.kind {
	case KindCancel:
		if buf[5] != 0 || tl != 0 || len(rest) != 0 {
			return request{}, fmt.Errorf("%w: a cancel frame carries nothing", ErrFrame)
		}
		return q, nil
	case KindAuth:
		if buf[5] != 0 || tl != 0 || len(rest) == 0 || len(rest) > maxCredential {
			return request{}, fmt.Errorf("%w: an auth frame carries a credential of 1 to %d bytes and nothing else", ErrFrame, maxCredential)
		}
		q.body = rest
		return q, nil
	case KindRequest:
	default:
		return request{}, fmt.Errorf("%w: unknown kind %d", ErrFrame, q.kind)
	}
	m, ok := methodName(buf[5])
	if !ok {
		return request{}, fmt.Errorf("%w: unknown method %d", ErrFrame, buf[5])
	}
	q.method = m
	q.target = targetString(rest[:tl])
	if len(q.target) == 0 || q.target[0] != '/' {
		return request{}, fmt.Errorf("%w: target %q does not start with /", ErrFrame, q.target)
	}
	q.body = rest[tl:]
	return q, nil
}

// hotTargets are the targets of the calls a busy client makes over and
// over; a frame naming one takes the constant rather than a copy.
var hotTargets = map[string]string{}

func init() {
	for _, p := range []string{api.PathAcquire, api.PathRelease, api.PathExtend, api.PathCheck,
		api.PathExtendBatch, api.PathRenew, api.PathSessionExtend} {
		hotTargets[p] = p
	}
}

func targetString(b []byte) string {
	if t, ok := hotTargets[string(b)]; ok {
		return t
	}
	return string(b)
}

// answer is one decoded answer frame.
type answer struct {
	id     uint32
	status int
	body   []byte
}

func readAnswer(r io.Reader) (answer, error) {
	buf, err := readFrame(r, answerHeader-4)
	if err != nil {
		return answer{}, err
	}
	return answer{
		id:     binary.BigEndian.Uint32(buf),
		status: int(binary.BigEndian.Uint16(buf[4:])),
		body:   buf[answerHeader-4:],
	}, nil
}

// Priority reports whether a request for target (a path with an optional
// ?query) travels on the priority budget of a connection: the calls the
// API names (api.Priority), extends and releases, so that a window full
// of waits cannot hold them back and cost a holder its lease.
func Priority(target string) bool { return api.Priority(target) }
