package raftport

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// What a peer's message may hold (issue 41). An engine's reader holds
// a message's bytes until it ends: the etcd engine's allocated a
// frame's declared length up front (a frame declaring 1 GiB, half sent,
// held 800 MB for as long as its connection stayed), and hashicorp/raft's
// msgpack decoder grows its buffer as the bytes arrive (588 MB and 13 s
// of CPU for the same). Each engine therefore tells the raft port how
// its messages are framed (Frames), and every connection raft reads
// from follows its bytes through a FrameParser as they are read (the
// streamConn): a declared length above the engine's bounds ends the
// connection before a byte of it is read; a message may hold MaxHeld
// bytes, those past the first 256 KiB drawn from a budget the port's
// connections share (Limits.MessageBudget), so that many
// connections do not add up to many messages' worth; and from its first
// byte a message must end within MessageTimeout (what both engines'
// senders give a message), plus a second for every MinRate bytes it
// streams (a snapshot's data), and no read in it may wait longer than
// MessageTimeout for a byte. Between messages a connection may be
// silent for as long as it likes: a link between two etcd followers is
// silent until an election.

// MaxEntry bounds what one log entry carries, on either engine: the
// state machine's largest command (a cancel-waits of 1,000 keys of
// 1 KiB and their holders, 1.28 MB) with room.
const MaxEntry = 2 << 20

// MaxSnapshot bounds the snapshot a peer may send: the state machine's
// largest (fsm reads 1 GiB at most) with room for what an engine adds.
const MaxSnapshot = 1<<30 + 1<<20

// A FrameParser follows the messages on one connection as its bytes are
// read.
type FrameParser interface {
	// Parse takes the next bytes of the connection, in the order they
	// arrived, and answers how many of p it took: all of them, or those
	// up to the end of a message (end true), the caller giving it the
	// rest next. Of the bytes taken, streamed are not held by the engine
	// while it reads the message (a snapshot's data). An error ends the
	// connection: bytes that break the framing, or a declared length
	// above the engine's bounds.
	Parse(p []byte) (took, streamed int, end bool, err error)
}

// Frames is an engine's framing of its raft connections.
type Frames struct {
	// Accepted and Dialed start the parser of a connection the port
	// accepted or dialed; nil: that side's bytes are not followed.
	Accepted, Dialed func() FrameParser
	// MaxHeld bounds the bytes of one message the engine holds while it
	// reads it: its largest legitimate message, with room.
	MaxHeld int64
	// MinRate is the least the bytes a message streams must arrive at,
	// in bytes a second; 0: the port's (Limits.MinRate).
	MinRate int64
}

// ErrMessage: a connection was cut in the middle of a message.
var ErrMessage = errors.New("raft port: a peer's message beyond the engine's bounds")

// frameMeter is one connection's account of the message in progress.
type frameMeter struct {
	p       FrameParser
	maxHeld int64
	free    int64 // held bytes that draw nothing from the budget
	timeout time.Duration
	minRate int64
	budget  *atomic.Int64 // bytes drawn by every connection's message in progress
	limit   int64         // of the budget

	start                 time.Time // the message's first byte
	held, streamed, total int64     // its bytes so far; total 0: no message in progress
	drawn                 int64     // from the budget
}

// deadline is when a read that begins at now must have read a byte of
// the message in progress: by the message's end, and within
// MessageTimeout; zero between messages.
func (m *frameMeter) deadline(now time.Time) time.Time {
	if m.total == 0 {
		return time.Time{}
	}
	end := m.start.Add(m.timeout + time.Duration(float64(m.streamed)/float64(m.minRate)*float64(time.Second)))
	if stall := now.Add(m.timeout); stall.Before(end) {
		return stall
	}
	return end
}

// feed accounts for b, bytes just read at now.
func (m *frameMeter) feed(b []byte, now time.Time) error {
	for len(b) > 0 {
		took, streamed, end, err := m.p.Parse(b)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrMessage, err)
		}
		if took <= 0 || took > len(b) || streamed < 0 || streamed > took {
			return fmt.Errorf("%w: the engine's parser took %d of %d bytes", ErrMessage, took, len(b))
		}
		if m.total == 0 {
			m.start = now
		}
		m.total += int64(took)
		m.streamed += int64(streamed)
		m.held += int64(took - streamed)
		if m.held > m.maxHeld {
			return fmt.Errorf("%w: a message holding more than %d bytes", ErrMessage, m.maxHeld)
		}
		if over := m.held - m.free; over > m.drawn {
			if m.budget.Add(over-m.drawn) > m.limit {
				m.budget.Add(m.drawn - over)
				return fmt.Errorf("%w: a message of %d bytes with the port's budget for long messages (%d bytes) spent", ErrMessage, m.held, m.limit)
			}
			m.drawn = over
		}
		if end {
			m.release()
		}
		b = b[took:]
	}
	return nil
}

// release ends the message in progress and gives back what it drew.
func (m *frameMeter) release() {
	m.budget.Add(-m.drawn)
	m.drawn, m.held, m.streamed, m.total = 0, 0, 0, 0
}
