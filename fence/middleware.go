package fence

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
)

// Header is the request header that carries the fencing token.
const Header = "Fencing-Token"

// ResourceFunc names the resource a request acts on.
type ResourceFunc func(*http.Request) string

// ByPath fences each URL path as its own resource.
func ByPath(r *http.Request) string { return r.URL.Path }

// errorBody is what Middleware answers on refusal.
type errorBody struct {
	Error    string `json:"error"`
	Code     string `json:"code"`
	Resource string `json:"resource"`
	Token    uint64 `json:"token,omitempty"`
	Highest  uint64 `json:"highest,omitempty"`
}

// Middleware fences next with f, any Fence (a Guard in memory, a file or a
// database backend). Each request's token comes from the Fencing-Token
// header (a decimal integer >= 1) and its resource from resource (ByPath
// when nil). next runs inside f.Admit, so the check and the handler's effect
// are atomic per resource; the request next sees carries Admit's ctx (a
// transactional backend's transaction travels in it). Refusals are JSON:
//
//   - 409 {"code":"missing_token"} when the header is absent or empty;
//   - 409 {"code":"stale_token","token":T,"highest":H} when T < H;
//   - 400 {"code":"invalid_token"} when the header is not a positive integer,
//     or there are two of them;
//   - 503 {"code":"fence_unavailable"} when f could not check or record the
//     token (a disk or database error), before next ran.
//
// If f fails after next has answered (a database commit failing), next's
// answer has already gone out; a handler on a transactional backend that
// must not answer success before the commit should buffer its answer.
//
// Methods in safe (e.g. GET, HEAD) pass through unfenced when listed; pass
// none to fence every request.
func Middleware(f Fence, resource ResourceFunc, next http.Handler, safe ...string) http.Handler {
	if resource == nil {
		resource = ByPath
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, m := range safe {
			if r.Method == m {
				next.ServeHTTP(w, r)
				return
			}
		}
		name := resource(r)
		if vs := r.Header.Values(Header); len(vs) > 1 {
			// Which one an upstream or handler reads is its own choice.
			writeError(w, http.StatusBadRequest, errorBody{Error: "request carries " + strconv.Itoa(len(vs)) + " " + Header + " headers, want one", Code: "invalid_token", Resource: name})
			return
		}
		raw := strings.TrimSpace(r.Header.Get(Header))
		var token uint64
		if raw != "" {
			t, err := strconv.ParseUint(raw, 10, 64)
			if err != nil || t == 0 {
				writeError(w, http.StatusBadRequest, errorBody{Error: "fencing token must be a positive integer, got " + strconv.Quote(raw), Code: "invalid_token", Resource: name})
				return
			}
			token = t
		}
		ran := false
		err := f.Admit(r.Context(), name, token, func(ctx context.Context) error {
			ran = true
			next.ServeHTTP(w, r.WithContext(ctx))
			return nil
		})
		var stale *StaleTokenError
		switch {
		case errors.As(err, &stale):
			writeError(w, http.StatusConflict, errorBody{Error: stale.Error(), Code: "stale_token", Resource: name, Token: stale.Token, Highest: stale.Highest})
		case errors.Is(err, ErrMissingToken):
			writeError(w, http.StatusConflict, errorBody{Error: "request carries no " + Header + " header", Code: "missing_token", Resource: name})
		case err != nil && !ran && r.Context().Err() == nil:
			// The fence itself failed (a disk or database error) before
			// the handler ran.
			writeError(w, http.StatusServiceUnavailable, errorBody{Error: "fence: " + err.Error(), Code: "fence_unavailable", Resource: name})
		}
	})
}

func writeError(w http.ResponseWriter, status int, body errorBody) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}
