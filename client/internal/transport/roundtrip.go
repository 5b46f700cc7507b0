package transport

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync/atomic"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/framing"
)

// Request is one call's request, as every attempt at it sends it.
type Request struct {
	Method string
	Path   string
	Query  url.Values
	Body   any // nil: none; sent as JSON, or in binary (Encode)
	// MaybeApplied, when set, is called for each attempt that may have
	// reached the server without its answer coming back.
	MaybeApplied func()

	json []byte // Body as JSON, once made
	bin  []byte // Body in the binary encoding of framed calls, when it has one
}

// Answer is a node's answer to one request, whatever it says.
type Answer struct {
	Status int
	Data   []byte
	Binary bool // the request went in the binary encoding: a 2xx Data is in it too
}

// Unreached is an attempt that got no answer from the node at Addr: it
// could not be reached, or the connection failed before the answer was
// read. Err says how.
type Unreached struct {
	Addr string
	Err  error
}

func (e *Unreached) Error() string { return e.Addr + ": " + e.Err.Error() }
func (e *Unreached) Unwrap() error { return e.Err }

// RequestError is a request that could not be made for Addr (a bad URL):
// nothing was sent.
type RequestError struct {
	Addr string
	Err  error
}

func (e *RequestError) Error() string { return "bad request to " + e.Addr + ": " + e.Err.Error() }
func (e *RequestError) Unwrap() error { return e.Err }

// encodeError is a request that could not be encoded: nothing was sent.
type encodeError struct{ err error }

func (e *encodeError) Error() string { return "fencelock: encoding request: " + e.err.Error() }
func (e *encodeError) Unwrap() error { return e.err }

// Encode makes r's body for sending: in binary when r is a hot call and
// the connections are framed, else as JSON. Call it again after changing
// Body. Its error is a body that cannot be encoded.
func (t *Conns) Encode(r *Request) error {
	r.json, r.bin = nil, nil
	if t.cfg.Framed {
		r.bin = binaryBody(r)
	}
	if r.Body == nil || r.bin != nil {
		return nil
	}
	return r.makeJSON()
}

// makeJSON makes r.json from Body, unless it is made already. With a
// binary form, Encode leaves it to be made only when a connection that
// takes the binary form is not at hand.
func (r *Request) makeJSON() error {
	if r.json != nil || r.Body == nil {
		return nil
	}
	b, err := json.Marshal(r.Body)
	if err != nil {
		return &encodeError{err}
	}
	r.json = b
	return nil
}

// noteMaybe calls r.MaybeApplied, if set.
func (r *Request) noteMaybe() {
	if r.MaybeApplied != nil {
		r.MaybeApplied()
	}
}

// maxAnswer bounds what is read of one answer (a list of 1000 leases with
// maximal keys is about 1.3 MiB).
const maxAnswer = 8 << 20

// maxRoomTries bounds how often a call looks for a framed connection with
// room before it waits on a full one.
const maxRoomTries = 8

// RoundTrip sends r, made ready by Encode, to the node at addr (a base
// URL) once, and returns its answer. Its errors are an *Unreached (no
// answer came; when ctx has ended, that is why), a *RequestError, or a
// body that could not be encoded.
func (t *Conns) RoundTrip(ctx context.Context, addr string, r Request) (Answer, error) {
	if t.cfg.Framed && (strings.HasPrefix(addr, "http://") || strings.HasPrefix(addr, "https://")) {
		fc, err := t.frameConn(ctx, addr, r.Path)
		if err != nil {
			return Answer{}, err
		}
		if fc != nil {
			return t.roundTripFramed(ctx, fc, addr, r)
		}
	}
	if err := r.makeJSON(); err != nil {
		return Answer{}, err
	}
	return t.roundTripHTTP(ctx, addr, r)
}

// frameConn returns a framed connection to addr (an http:// or https://
// base URL) with room for a request to path, or nil when that server
// speaks only HTTP. Extends and releases have a budget of their own on
// every connection; other requests past a connection's window go to
// another one (framing.Pool), so thousands of waits cannot hold up an
// extend.
func (t *Conns) frameConn(ctx context.Context, addr, path string) (*framing.Conn, error) {
	pool, host := &t.frames, strings.TrimPrefix(addr, "http://")
	if h, ok := strings.CutPrefix(addr, "https://"); ok {
		pool, host = &t.tlsFrames, h
	}
	fc, err := pool.GetFor(ctx, host, path)
	if err != nil {
		return nil, &Unreached{Addr: addr, Err: err}
	}
	return fc, nil
}

func (t *Conns) roundTripFramed(ctx context.Context, fc *framing.Conn, addr string, r Request) (Answer, error) {
	target := r.Path
	if len(r.Query) > 0 {
		target += "?" + r.Query.Encode()
	}
	// send is one try on fc: in binary when fc's server takes this call
	// so, else as JSON (made the first time it is needed).
	var binary bool
	send := func(fc *framing.Conn, wait bool) (int, []byte, error) {
		binary = r.bin != nil && fc.Calls(r.Path)
		if binary {
			if wait {
				return fc.RoundTrip(ctx, framing.MethodCall, r.Path, r.bin)
			}
			return fc.TryRoundTrip(ctx, framing.MethodCall, r.Path, r.bin)
		}
		if err := r.makeJSON(); err != nil {
			return 0, nil, err
		}
		if wait {
			return fc.RoundTrip(ctx, r.Method, target, r.json)
		}
		return fc.TryRoundTrip(ctx, r.Method, target, r.json)
	}
	// The pool picked fc for its room, but other calls may have taken it
	// since: try again (the pool then dials another connection, up to
	// its limit) rather than wait on a window that long waits may hold
	// for good. Only when every connection stays full, wait.
	status, data, err := send(fc, false)
	for tries := 0; errors.Is(err, framing.ErrNoRoom); tries++ {
		if tries == maxRoomTries {
			status, data, err = send(fc, true)
			break
		}
		if fc, err = t.frameConn(ctx, addr, r.Path); err != nil {
			return Answer{}, err
		}
		if fc == nil {
			if err := r.makeJSON(); err != nil {
				return Answer{}, err
			}
			return t.roundTripHTTP(ctx, addr, r)
		}
		status, data, err = send(fc, false)
	}
	if err != nil {
		var ee *encodeError
		if errors.As(err, &ee) {
			return Answer{}, err
		}
		r.noteMaybe()
		return Answer{}, &Unreached{Addr: addr, Err: err}
	}
	return Answer{Status: status, Data: data, Binary: binary}, nil
}

func (t *Conns) roundTripHTTP(ctx context.Context, addr string, r Request) (Answer, error) {
	u := addr + r.Path
	if len(r.Query) > 0 {
		u += "?" + r.Query.Encode()
	}
	var rd io.Reader
	if r.json != nil {
		rd = bytes.NewReader(r.json)
	}
	// A request may have reached the server once it had a connection;
	// before, it surely did not.
	var connected atomic.Bool
	if r.MaybeApplied != nil {
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { connected.Store(true) }})
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, u, rd)
	if err != nil {
		return Answer{}, &RequestError{Addr: addr, Err: err}
	}
	if r.json != nil {
		req.Header.Set("Content-Type", api.ContentType)
	}
	req.Header.Set("Accept", api.ContentType)
	if t.cfg.Token != "" {
		req.Header.Set(api.HeaderAuthorization, "Bearer "+t.cfg.Token)
	}
	resp, err := t.cfg.HTTP.Do(req)
	if err != nil {
		if connected.Load() {
			r.noteMaybe()
		}
		return Answer{}, &Unreached{Addr: addr, Err: unwrapURLError(err)}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		r.noteMaybe()
		return Answer{}, &Unreached{Addr: addr, Err: fmt.Errorf("reading answer: %v", err)}
	}
	return Answer{Status: resp.StatusCode, Data: data}, nil
}

func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
