package hashicorp

import (
	"sync"

	"github.com/hashicorp/raft"
)

// recentLogs keeps the entries last stored in memory, in a ring by index,
// in front of the node's log store. A leader sends every entry it writes
// to its followers, and hashicorp/raft reads each one back from the store
// to do so (GetLog per entry): from raft-wal that is a 64 KiB read per
// entry, 15% of a cluster leader's CPU under W1. raft.LogCache does the
// same but rewrites the store's error as a string, which would hide a
// *StorageError from the proposer (proposalError); this one returns the
// store's errors as they are.
//
// An entry is cached only once the store has it, so a read never returns
// what is not durable; a delete empties the ring. The cached entry is the
// one raft stored, which raft does not change afterwards, and is what the
// checked log answers for it (checkedLog.GetLog strips the checksum it
// adds).
type recentLogs struct {
	raft.LogStore
	mu   sync.RWMutex
	ring []*raft.Log
}

// recentLogsSize is how many entries the ring holds: far more than raft
// sends in one AppendEntries (MaxAppendEntries, 64), so a follower that is
// keeping up is served from memory; about 200 KiB for W1's entries.
const recentLogsSize = 1024

func newRecentLogs(store raft.LogStore, size int) *recentLogs {
	return &recentLogs{LogStore: store, ring: make([]*raft.Log, size)}
}

func (c *recentLogs) GetLog(index uint64, l *raft.Log) error {
	c.mu.RLock()
	e := c.ring[index%uint64(len(c.ring))]
	c.mu.RUnlock()
	if e != nil && e.Index == index {
		*l = *e
		return nil
	}
	return c.LogStore.GetLog(index, l)
}

func (c *recentLogs) StoreLog(l *raft.Log) error { return c.StoreLogs([]*raft.Log{l}) }

func (c *recentLogs) StoreLogs(logs []*raft.Log) error {
	if err := c.LogStore.StoreLogs(logs); err != nil {
		return err
	}
	c.mu.Lock()
	for _, l := range logs {
		c.ring[l.Index%uint64(len(c.ring))] = l
	}
	c.mu.Unlock()
	return nil
}

func (c *recentLogs) DeleteRange(min, max uint64) error {
	c.mu.Lock()
	clear(c.ring)
	c.mu.Unlock()
	return c.LogStore.DeleteRange(min, max)
}

// IsMonotonic passes the store's answer on (raft.MonotonicLogStore).
func (c *recentLogs) IsMonotonic() bool {
	m, ok := c.LogStore.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}
