// Package server wires one fencelock node together and serves it: the
// raft node over its stores (internal/node), the lock service over it
// (internal/service), the guard (internal/auth) and the transports over
// the service (internal/httpapi, internal/framing), from one Config (its
// type, defaults and Validate are config.go). It owns what is the
// process's rather than any layer's: TLS on the client port and its
// reload, the listeners and their connection cap, the open-file limit,
// the metrics registry, and the client this node calls other nodes with.
//
// Without TLS the client and raft ports serve loopback addresses only
// (Config.Insecure allows others). A Server embeds its service, so an
// in-process caller can call the operations directly; such a caller is
// trusted, no principal is checked.
package server
