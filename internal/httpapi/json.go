package httpapi

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/service"
)

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", api.ContentType)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, e *service.Error) {
	writeJSON(w, e.Status(), e.Wire())
}

// reply writes v, or hands err to the router.
func reply(w http.ResponseWriter, v any, err error) *service.Error {
	if err != nil {
		return service.AsError(err)
	}
	writeJSON(w, http.StatusOK, v)
	return nil
}

// decodeBody reads one JSON object of at most api.MaxBodyBytes into v,
// refusing unknown fields and trailing data. Its errors name the field.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) *service.Error {
	r.Body = http.MaxBytesReader(w, r.Body, api.MaxBodyBytes)
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
		return service.Invalid("body", "body must hold exactly one JSON object")
	}
	return nil
}
func jsonError(err error) *service.Error {
	var (
		mb     *http.MaxBytesError
		syntax *json.SyntaxError
		typ    *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &mb):
		return service.Invalid("body", "body is larger than %d bytes", mb.Limit)
	case errors.Is(err, io.EOF):
		return service.Invalid("body", "body is empty; a JSON object is required")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return service.Invalid("body", "body is truncated JSON")
	case errors.As(err, &syntax):
		return service.Invalid("body", "malformed JSON at byte %d: %v", syntax.Offset, err)
	case errors.As(err, &typ):
		if typ.Field == "" {
			return service.Invalid("body", "body must be a JSON object, not %s", typ.Value)
		}
		return service.Invalid(typ.Field, "%s must be %s, not %s", typ.Field, jsonKind(typ.Type.Kind().String()), typ.Value)
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		name = strings.Trim(name, `"`)
		return service.Invalid(name, "unknown field %q", name)
	}
	return service.Invalid("body", "bad JSON: %v", err)
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
