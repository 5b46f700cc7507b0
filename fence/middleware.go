package fence

import (
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

// Middleware fences next with g. Each request's token comes from the
// Fencing-Token header (a decimal integer >= 1) and its resource from
// resource (ByPath when nil). next runs inside Guard.Do, so the check and
// the handler's effect are atomic per resource. Refusals are JSON:
//
//   - 409 {"code":"missing_token"} when the header is absent or empty;
//   - 409 {"code":"stale_token","token":T,"highest":H} when T < H;
//   - 400 {"code":"invalid_token"} when the header is not a positive integer.
//
// Methods in safe (e.g. GET, HEAD) pass through unfenced when listed; pass
// none to fence every request.
func Middleware(g *Guard, resource ResourceFunc, next http.Handler, safe ...string) http.Handler {
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
		err := g.Do(name, token, func() error {
			next.ServeHTTP(w, r)
			return nil
		})
		var stale *StaleTokenError
		switch {
		case errors.As(err, &stale):
			writeError(w, http.StatusConflict, errorBody{Error: stale.Error(), Code: "stale_token", Resource: name, Token: stale.Token, Highest: stale.Highest})
		case errors.Is(err, ErrMissingToken):
			writeError(w, http.StatusConflict, errorBody{Error: "request carries no " + Header + " header", Code: "missing_token", Resource: name})
		}
	})
}

func writeError(w http.ResponseWriter, status int, body errorBody) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}
