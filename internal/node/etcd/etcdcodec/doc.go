// Package etcdcodec is how the etcd-io/raft engine (internal/node/etcd)
// puts its state into bytes, and what it takes back from them:
//
//   - on the raft port: a message's frames, a snapshot's chunks, the
//     preamble and hello a connection opens with (WriteMsg, ReadMsg,
//     Hello, ReadHello), the parser the port follows them with (Frames),
//     and the check every peer's message passes before raft sees it
//     (CheckMsg: its terms, and a snapshot's data);
//   - in the shared stores (internal/node): an entry as a raft.Log of
//     raft-wal (Entry, Append, Entries), the hard state in the stable
//     store, and raft's memory storage rebuilt from both (SaveHardState,
//     LoadMemory, GetHardState);
//   - members: the etcd id of a node (ID) and a configuration as a
//     raft.Configuration and back (Configuration, ConfState);
//   - snapshots: the members' names ahead of the state machine's bytes
//     in a snapshot's data (SnapHeader, DecodeSnap), and the newest
//     snapshot of a store read back (LoadSnap).
//
// It holds no state and runs no goroutine: the engine's core, transport
// and snapshots are in internal/node/etcd.
package etcdcodec
