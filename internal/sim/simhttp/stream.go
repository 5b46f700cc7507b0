package simhttp

import (
	"bufio"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/fencelock/fencelock/api"
)

// StreamWriter is a handler's side of a streamed answer: its writes are
// queued, never blocking the handler, for the world's network to take
// one chunk at a time (Next).
type StreamWriter struct {
	h      http.Header
	mu     sync.Mutex
	code   int
	chunks [][]byte
	ended  bool
	more   chan struct{} // poked on every change (capacity 1)
}

// NewStreamWriter is an empty streamed answer, its head not yet written.
func NewStreamWriter() *StreamWriter {
	return &StreamWriter{h: http.Header{}, more: make(chan struct{}, 1)}
}

func (s *StreamWriter) poke() {
	select {
	case s.more <- struct{}{}:
	default:
	}
}

// Header is the answer's header, read once its head is written (Code).
func (s *StreamWriter) Header() http.Header { return s.h }

// WriteHeader writes the answer's status, once.
func (s *StreamWriter) WriteHeader(code int) {
	s.mu.Lock()
	if s.code == 0 {
		s.code = code
	}
	s.mu.Unlock()
	s.poke()
}

// Write queues b as a chunk of the answer.
func (s *StreamWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	if s.code == 0 {
		s.code = http.StatusOK
	}
	s.chunks = append(s.chunks, append([]byte(nil), b...))
	s.mu.Unlock()
	s.poke()
	return len(b), nil
}

// Flush does nothing: every write is a chunk of its own.
func (s *StreamWriter) Flush() {}

// Finish is the handler's return: the answer ends after its chunks.
func (s *StreamWriter) Finish() {
	s.mu.Lock()
	s.ended = true
	if s.code == 0 {
		s.code = http.StatusOK
	}
	s.mu.Unlock()
	s.poke()
}

// Code is the answer's status; 0 until its head is written.
func (s *StreamWriter) Code() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.code
}

// More is poked on every change to the answer (its head, a chunk, its
// end); it holds one poke at most.
func (s *StreamWriter) More() <-chan struct{} { return s.more }

// Next takes the first chunk queued (nil: none yet), and says whether
// the answer has ended with nothing left to take.
func (s *StreamWriter) Next() (chunk []byte, ended bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ended = s.ended && len(s.chunks) == 0
	if len(s.chunks) > 0 {
		chunk, s.chunks = s.chunks[0], s.chunks[1:]
	}
	return chunk, ended
}

// Body is what the handler wrote and Next has not taken (the whole of an
// error answer, once ended).
func (s *StreamWriter) Body() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b []byte
	for _, c := range s.chunks {
		b = append(b, c...)
	}
	return b
}

// ReadEvents reads the server-sent events of r, handing each complete
// one's name and data to each, until each answers an error (which it
// answers), r fails, or r ends (io.ErrUnexpectedEOF: a stream of events
// ends only when it breaks).
func ReadEvents(r io.Reader, each func(event, data string) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var event, data string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = line[len("event: "):]
		case strings.HasPrefix(line, "data: "):
			data = line[len("data: "):]
		case line == "" && event != "":
			ev, d := event, data
			event, data = "", ""
			if err := each(ev, d); err != nil {
				return err
			}
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return io.ErrUnexpectedEOF
}

// WantsStream says whether req asks for server-sent events.
func WantsStream(req *http.Request) bool {
	return strings.Contains(req.Header.Get("Accept"), api.ContentTypeEventStream)
}

// Bearer is the token req carries ("": none).
func Bearer(req *http.Request) string {
	const p = "Bearer "
	h := req.Header.Get("Authorization")
	if len(h) > len(p) && h[:len(p)] == p {
		return h[len(p):]
	}
	return ""
}
