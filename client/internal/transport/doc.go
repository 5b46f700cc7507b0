// Package transport is how the Go client reaches fencelock's nodes: the
// address book it fails over along (which node to ask, and which answered
// last), and one round trip to one node, over a framed connection (in the
// binary encoding for the hot calls) or over HTTP/1.1, plain or TLS.
//
// It knows nothing of retries, leases or the client's errors. An answer
// is a status and a body, whatever it says; an attempt that got no answer
// is an *Unreached, which the client words as its ErrUnreachable.
package transport
