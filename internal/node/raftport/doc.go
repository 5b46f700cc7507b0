// Package raftport is the raft port both engines' transports run on: the
// listener and its budgets (Limits, Stats), the mutual TLS with a node
// certificate naming a member and, with a cluster secret, the proof of it
// read before the handshake (PeerTLS, PeerProof); the connections raft
// reads from (streamConn), which follow each peer's message through the
// engine's framing and cut it at its bounds (Frames, MaxEntry,
// MaxSnapshot); and the TermGuard every peer's term passes before raft
// sees it. The engines (internal/node/hashicorp, internal/node/etcd) build
// their transports on a Port; internal/node's Config carries its settings
// (Config.RaftPortConfig).
//
// It knows no engine and no data directory: it imports neither raft
// library nor internal/node (TestEngineImports in internal/node holds it
// to that).
package raftport
