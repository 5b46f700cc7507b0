package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/locktable"
)

// Limits of the API (docs/API.md).
const (
	MinTTL       = 100 * time.Millisecond
	MaxTTL       = 24 * time.Hour
	MaxWait      = time.Hour
	MaxBodyBytes = 64 << 10
	MaxBatch     = fsm.MaxBatch
	DefaultLimit = 1000
	MaxLimit     = 10000
)

// Error codes on the wire.
const (
	codeInvalid          = "invalid_argument"
	codeHeld             = "held"
	codeNotHeld          = "not_held"
	codeNotFound         = "not_found"
	codeMethodNotAllowed = "method_not_allowed"
	codeNotLeader        = "not_leader"
	codeUnavailable      = "unavailable"
	codeInternal         = "internal"
	// The log cannot write for lack of disk space (507) or of file
	// descriptors (503); retry later: the node recovers by itself.
	codeNoSpace          = "no_space"
	codeTooManyOpenFiles = "too_many_open_files"
)

// apiError is every non-2xx body.
type apiError struct {
	Status      int    `json:"-"`
	Message     string `json:"error"`
	Code        string `json:"code"`
	Field       string `json:"field,omitempty"`
	Holder      string `json:"holder,omitempty"`
	RemainingMs *int64 `json:"remaining_ms,omitempty"`
	Leader      string `json:"leader,omitempty"`
}

func (e *apiError) Error() string { return e.Message }

func invalid(field, format string, args ...any) *apiError {
	return &apiError{Status: http.StatusBadRequest, Code: codeInvalid, Field: field, Message: fmt.Sprintf(format, args...)}
}

// lease is the wire form of a grant.
type lease struct {
	Key         string `json:"key"`
	Holder      string `json:"holder"`
	Token       uint64 `json:"token"`
	TTLMs       int64  `json:"ttl_ms"`
	RemainingMs int64  `json:"remaining_ms"`
}

func ms(d locktable.Duration) int64 { return int64(d / locktable.Millisecond) }

func wireLease(l locktable.Lease, now locktable.Time) lease {
	return lease{Key: l.Key, Holder: l.Holder, Token: l.Token, TTLMs: ms(l.TTL), RemainingMs: ms(l.Remaining(now))}
}

// Requests. Field names are the contract; unknown fields are refused.
type acquireRequest struct {
	Key       string `json:"key"`
	Holder    string `json:"holder"`
	TTLMs     int64  `json:"ttl_ms"`
	WaitMs    int64  `json:"wait_ms"`
	RequestID string `json:"request_id"`
}

type renewRequest struct {
	Key       string `json:"key"`
	Holder    string `json:"holder"`
	TTLMs     int64  `json:"ttl_ms"`
	RequestID string `json:"request_id"`
}

type extendRequest struct {
	Key       string `json:"key"`
	Holder    string `json:"holder"`
	Token     uint64 `json:"token"`
	TTLMs     int64  `json:"ttl_ms"`
	RequestID string `json:"request_id"`
}

type batchItem struct {
	Key   string `json:"key"`
	Token uint64 `json:"token"`
}

type extendBatchRequest struct {
	Holder    string      `json:"holder"`
	TTLMs     int64       `json:"ttl_ms"`
	Leases    []batchItem `json:"leases"`
	RequestID string      `json:"request_id"`
}

type releaseRequest struct {
	Key       string `json:"key"`
	Holder    string `json:"holder"`
	Token     uint64 `json:"token"`
	RequestID string `json:"request_id"`
}

type batchResult struct {
	Key   string `json:"key"`
	Token uint64 `json:"token"`
	OK    bool   `json:"ok"`
	Lease *lease `json:"lease,omitempty"`
	Code  string `json:"code,omitempty"`
	Error string `json:"error,omitempty"`
}

// decodeBody reads one JSON object of at most MaxBodyBytes into v,
// refusing unknown fields and trailing data. Its errors name the field.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) *apiError {
	r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return jsonError(err)
		}
		return invalid("body", "body must hold exactly one JSON object")
	}
	return nil
}

func jsonError(err error) *apiError {
	var (
		mb     *http.MaxBytesError
		syntax *json.SyntaxError
		typ    *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &mb):
		return invalid("body", "body is larger than %d bytes", mb.Limit)
	case errors.Is(err, io.EOF):
		return invalid("body", "body is empty; a JSON object is required")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return invalid("body", "body is truncated JSON")
	case errors.As(err, &syntax):
		return invalid("body", "malformed JSON at byte %d: %v", syntax.Offset, err)
	case errors.As(err, &typ):
		if typ.Field == "" {
			return invalid("body", "body must be a JSON object, not %s", typ.Value)
		}
		return invalid(typ.Field, "%s must be %s, not %s", typ.Field, jsonKind(typ.Type.Kind().String()), typ.Value)
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		name = strings.Trim(name, `"`)
		return invalid(name, "unknown field %q", name)
	}
	return invalid("body", "bad JSON: %v", err)
}

func jsonKind(k string) string {
	switch {
	case strings.HasPrefix(k, "int"), strings.HasPrefix(k, "uint"):
		return "an integer in range"
	case k == "string":
		return "a string"
	case k == "slice":
		return "an array"
	}
	return "a " + k
}

// Validation of the fields, shared by the handlers.

func checkKey(field, key string) *apiError {
	switch {
	case key == "":
		return invalid(field, "%s is required", field)
	case len(key) > locktable.MaxKeyLen:
		return invalid(field, "%s is %d bytes; the limit is %d", field, len(key), locktable.MaxKeyLen)
	}
	return nil
}

func checkHolder(holder string) *apiError {
	switch {
	case holder == "":
		return invalid("holder", "holder is required")
	case len(holder) > locktable.MaxHolderLen:
		return invalid("holder", "holder is %d bytes; the limit is %d", len(holder), locktable.MaxHolderLen)
	}
	return nil
}

func checkTTL(ttlMs int64) (locktable.Duration, *apiError) {
	d := time.Duration(ttlMs) * time.Millisecond
	if ttlMs < MinTTL.Milliseconds() || ttlMs > MaxTTL.Milliseconds() {
		return 0, invalid("ttl_ms", "ttl_ms must be between %d and %d", MinTTL.Milliseconds(), MaxTTL.Milliseconds())
	}
	return locktable.Duration(d), nil
}

func checkRequestID(id string) *apiError {
	if len(id) > fsm.MaxRequestIDLen {
		return invalid("request_id", "request_id is %d bytes; the limit is %d", len(id), fsm.MaxRequestIDLen)
	}
	return nil
}

func firstErr(errs ...*apiError) *apiError {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
