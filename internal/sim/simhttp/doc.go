// Package simhttp is the simulated world's HTTP plumbing that needs no
// world: a response writer that queues a streamed answer's chunks for the
// world's network to carry, the reading of a server-sent event stream, a
// watch over the nodes' event streams in the shape of client.Watch
// (Watcher, which sends its requests through the world's network and
// waits on the world's virtual time), and what a request asks for in its
// headers. The world (internal/sim) decides when and whether anything is
// carried; nothing here draws from the world's randomness.
package simhttp
