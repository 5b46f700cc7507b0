package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/fence/filefence"
)

// store is the resource: values by name, each with the token that wrote it.
type store struct {
	mu     sync.Mutex
	values map[string]entry
}

type entry struct {
	Name  string `json:"name"`
	Value string `json:"value"`
	Token uint64 `json:"token"`
}

// newHandler serves the store under /v/, fenced by f (unfenced when f is
// nil). With the fence, a PUT's effect happens inside f.Admit, atomically
// with the token check: that is where the check has to live.
func newHandler(f fence.Fence) http.Handler {
	s := &store{values: map[string]entry{}}
	var values http.Handler = http.HandlerFunc(s.serve)
	fenced := f != nil
	if fenced {
		values = fence.Middleware(f, fence.ByPath, values, http.MethodGet, http.MethodHead)
	}
	mux := http.NewServeMux()
	mux.Handle("/v/", values)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, map[string]any{"status": "ok", "fenced": fenced})
	})
	return mux
}

func (s *store) serve(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, "/v/")
	if name == "" {
		writeJSON(w, 404, map[string]string{"error": "no value name in the path", "code": "not_found"})
		return
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		s.mu.Lock()
		e, ok := s.values[name]
		s.mu.Unlock()
		if !ok {
			writeJSON(w, 404, map[string]string{"error": "no value " + strconv.Quote(name), "code": "not_found"})
			return
		}
		writeJSON(w, 200, e)
	case http.MethodPut:
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		if err != nil {
			writeJSON(w, 400, map[string]string{"error": "body: " + err.Error(), "code": "invalid_argument"})
			return
		}
		// Unfenced, a token is only recorded; fenced, the middleware has
		// already checked it.
		token, _ := strconv.ParseUint(strings.TrimSpace(r.Header.Get(fence.Header)), 10, 64)
		e := entry{Name: name, Value: string(body), Token: token}
		s.mu.Lock()
		s.values[name] = e
		s.mu.Unlock()
		writeJSON(w, 200, e)
	default:
		w.Header().Set("Allow", "GET, HEAD, PUT")
		writeJSON(w, 405, map[string]string{"error": "use GET or PUT", "code": "method_not_allowed"})
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func runServe(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stdout)
	listen := fs.String("listen", "127.0.0.1:7480", "`address` to listen on (port 0 picks one)")
	noFence := fs.Bool("no-fence", false, "serve without the fence (to see a stale write win)")
	state := fs.String("state", "", "keep the fence's marks in `DIR` (fsynced), so a restarted store still refuses stale tokens; without it they are in memory only")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return &exitError{2, err}
	}
	if *noFence && *state != "" {
		return &exitError{2, errors.New("--state and --no-fence do not go together")}
	}
	var f fence.Fence
	mode := "fenced, marks in memory"
	switch {
	case *noFence:
		mode = "NOT fenced"
	case *state != "":
		ff, err := filefence.Open(*state)
		if err != nil {
			return err
		}
		defer ff.Close()
		f, mode = ff, "fenced, marks in "+*state
	default:
		f = fence.NewGuard()
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	// The first line says where: a script (or test) can start on port 0.
	fmt.Fprintf(stdout, "fencedstore listening on http://%s (%s)\n", ln.Addr(), mode)
	srv := &http.Server{Handler: newHandler(f), ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return srv.Shutdown(sctx)
	}
}
