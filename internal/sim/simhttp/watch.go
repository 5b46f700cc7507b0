package simhttp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/internal/sim/simclock"
)

// Watcher watches every key over the nodes' event streams (server-sent
// events), in the shape of client.Watch: it streams from one node, and
// on a broken stream or a refusal streams again from the next, after the
// last revision it was told; a compaction ends it. Its waits are on the
// clock of the caller's (a world's virtual time).
type Watcher struct {
	Client *http.Client // carries the requests (the world's network)
	Addrs  []string     // the nodes' client addresses, tried in turn
	// Secret is the token to send now ("": none).
	Secret func() string
	// Ended is told of each stream that ended while the watch went on.
	Ended func(addr string, after api.Revision, err error)
	// Undecodable is told of a streamed event that does not decode (the
	// stream ends with err).
	Undecodable func(err error, data string)
}

// Watch is one watch of a Watcher's: the events it was told, in order,
// and why it ended once Events is closed.
type Watch struct {
	events chan client.Event
	mu     sync.Mutex
	err    error
}

// Events are the watch's events; closed when it ends.
func (s *Watch) Events() <-chan client.Event { return s.events }

// Err is why the watch ended (nil while it goes on).
func (s *Watch) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func (s *Watch) end(err error) {
	s.mu.Lock()
	s.err = err
	s.mu.Unlock()
}

// Watch starts a watch of every key after after, until ctx ends or a
// compaction does.
func (wr *Watcher) Watch(ctx context.Context, after api.Revision) *Watch {
	started := true
	s := &Watch{events: make(chan client.Event, 256)}
	go func() {
		defer close(s.events)
		for try := 0; ; try++ {
			addr := wr.Addrs[try%len(wr.Addrs)]
			err := wr.once(ctx, addr, &after, &started, s.events)
			if ctx.Err() == nil {
				wr.Ended(addr, after, err)
			}
			var ce *client.CompactedError
			if ctx.Err() != nil || errors.As(err, &ce) {
				s.end(cmpErr(ctx.Err(), err))
				return
			}
			if !simclock.Sleep(ctx, 200*time.Millisecond) {
				s.end(ctx.Err())
				return
			}
		}
	}()
	return s
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// once streams from the node at addr until the stream ends.
func (wr *Watcher) once(ctx context.Context, addr string, after *api.Revision, started *bool, out chan<- client.Event) error {
	u := "http://" + addr + api.PathWatch + "?" + api.QueryPrefix + "="
	if *started {
		u += "&" + api.QueryAfter + "=" + after.String()
	}
	// The head must come within a while: a lost request is asked again.
	hctx, hcancel := context.WithCancel(ctx)
	defer hcancel()
	t := time.AfterFunc(5*time.Second, hcancel)
	req, err := http.NewRequestWithContext(hctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", api.ContentTypeEventStream)
	if sec := wr.Secret(); sec != "" {
		req.Header.Set("Authorization", "Bearer "+sec)
	}
	resp, err := wr.Client.Do(req)
	if !t.Stop() || err != nil {
		if err == nil {
			_ = resp.Body.Close()
			err = errors.New("simhttp: no head in time")
		}
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		var e api.Error
		b, _ := io.ReadAll(resp.Body)
		if json.Unmarshal(b, &e) == nil && e.Code == api.CodeCompacted && e.CompactRevision != nil {
			return &client.CompactedError{After: *after, Oldest: *e.CompactRevision}
		}
		return fmt.Errorf("simhttp: stream answered %d: %s", resp.StatusCode, b)
	}
	return ReadEvents(resp.Body, func(ev, d string) error {
		switch ev {
		case api.SSEProgress:
			return nil
		case api.SSEError:
			var e api.Error
			if json.Unmarshal([]byte(d), &e) == nil && e.Code == api.CodeCompacted && e.CompactRevision != nil {
				return &client.CompactedError{After: *after, Oldest: *e.CompactRevision}
			}
			return fmt.Errorf("simhttp: stream ended: %s", d)
		}
		var we api.WatchEvent
		if err := json.Unmarshal([]byte(d), &we); err != nil {
			wr.Undecodable(err, d)
			return err
		}
		if *started && we.Revision.Compare(*after) <= 0 {
			return nil
		}
		select {
		case out <- client.Event{Revision: we.Revision, Type: we.Type, Key: we.Key, Holder: we.Holder, Token: we.Token,
			TTL: api.Duration(we.TTLMs), Reason: we.Reason, At: api.Duration(we.AtMs), Since: api.Duration(we.SinceMs)}:
		case <-ctx.Done():
			return ctx.Err()
		}
		*after, *started = we.Revision, true
		return nil
	})
}
