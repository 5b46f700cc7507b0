// Package node is what both raft engines share: the durable stores a
// node runs on, its Config and its view of its peers. Each engine is a
// package of its own that builds on it — internal/node/hashicorp (hashicorp/raft,
// the default) and internal/node/etcd (etcd-io/raft, --engine etcd) — and
// the service sees either through internal/replica.
//
// What lives here:
//
//   - Storage (OpenStorage): the data directory, claimed for one engine
//     (fencelock.engine) and locked; the log (raft-wal, sealed with a
//     checksum per entry by checkedLog and healed after a failed rotation
//     by healingWAL); the snapshot store; the state file with its token
//     ceiling, log watermark and pending floor; the checks that refuse a
//     damaged directory at start (*DataDirError); in memory without a
//     data directory.
//   - Machine: the state machine as an engine applies it, raising the
//     token ceiling past every token a batch issued before any of the
//     batch is answered.
//   - Recover: the offline repair of a single node's data directory.
//   - PeerWatch: a leader's view of its peers' answers.
//
// The raft port both engines listen on (its listener, budgets, TLS
// handshake, message framing and term guard) is a package of its own
// below this one, internal/node/raftport; Config carries its settings
// (Config.RaftPortConfig).
//
// The data directory's format is raft-wal's log and hashicorp/raft's file
// snapshot store, so this package names their types (raft.Log,
// raft.LogStore, raft.SnapshotStore) from github.com/hashicorp/raft; it
// never runs hashicorp's engine (TestEngineImports holds every package to
// that).
//
// A proposal travels, on either engine:
//
//  1. The engine hands the encoded command to raft, which seals it
//     (checkedLog), writes and fsyncs it (healingWAL), replicates it to a
//     quorum and commits it.
//  2. On every node the engine applies committed entries in batches
//     through the Machine, which raises the token ceiling in the state
//     file (tokenFloor, fsynced) past every token the batch issued,
//     before any of its entries is answered.
//  3. The engine answers the state machine's result, unless this node
//     could not record the ceiling (Machine.FloorErr): then nothing is
//     answered as a grant.
package node
