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
	Key      string `json:"key,omitempty"`    // the lock key the token came for
	Bound    string `json:"bound,omitempty"`  // the lock key the resource is bound to
	Issued   uint64 `json:"issued,omitempty"` // the lock service's highest token
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
//   - 409 {"code":"unverified_token","key":K,"token":T,"issued":I} when f
//     verifies (Verification) and the lock service does not hold T as a
//     live grant of K; 409 {"code":"wrong_key","key":K,"bound":B} when the
//     resource is bound to lock key B and the token came for K; 400
//     {"code":"missing_key"} when the resource is bound to no key and the
//     request names none (a fence that binds on first use); 409
//     {"code":"unbound_resource"} when the fence's configuration binds
//     the resource to no key; 400 {"code":"invalid_key"} for two
//     Fencing-Key headers;
//   - 503 {"code":"fence_unavailable"} when f could not check or record the
//     token (a disk or database error, or the lock service unreachable or
//     not answering within the Verification's Timeout), before next ran.
//
// The lock key comes from the Fencing-Key header (KeyHeader), put in the
// context Admit gets (WithKey).
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
		keys := r.Header.Values(KeyHeader)
		if len(keys) > 1 {
			writeError(w, http.StatusBadRequest, errorBody{Error: "request carries " + strconv.Itoa(len(keys)) + " " + KeyHeader + " headers, want one", Code: "invalid_key", Resource: name})
			return
		}
		ctx := r.Context()
		if len(keys) == 1 && strings.TrimSpace(keys[0]) != "" {
			ctx = WithKey(ctx, strings.TrimSpace(keys[0]))
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
		err := f.Admit(ctx, name, token, func(ctx context.Context) error {
			ran = true
			next.ServeHTTP(w, r.WithContext(ctx))
			return nil
		})
		var (
			stale *StaleTokenError
			unver *UnverifiedTokenError
			wrong *WrongKeyError
		)
		switch {
		case errors.As(err, &stale):
			writeError(w, http.StatusConflict, errorBody{Error: stale.Error(), Code: "stale_token", Resource: name, Token: stale.Token, Highest: stale.Highest})
		case errors.As(err, &unver):
			writeError(w, http.StatusConflict, errorBody{Error: unver.Error(), Code: "unverified_token", Resource: name, Token: unver.Token, Key: unver.Key, Issued: unver.Issued})
		case errors.As(err, &wrong):
			writeError(w, http.StatusConflict, errorBody{Error: wrong.Error(), Code: "wrong_key", Resource: name, Token: wrong.Token, Key: wrong.Key, Bound: wrong.Bound})
		case errors.Is(err, ErrNoKey):
			writeError(w, http.StatusBadRequest, errorBody{Error: err.Error(), Code: "missing_key", Resource: name})
		case errors.Is(err, ErrUnbound):
			writeError(w, http.StatusConflict, errorBody{Error: err.Error(), Code: "unbound_resource", Resource: name})
		case errors.Is(err, ErrUnavailable) && r.Context().Err() == nil:
			writeError(w, http.StatusServiceUnavailable, errorBody{Error: err.Error(), Code: "fence_unavailable", Resource: name})
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
