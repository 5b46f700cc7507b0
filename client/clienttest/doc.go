// Package clienttest is for testing code that uses package client: Server
// is the real fencelock server run in-process behind a fault-injecting
// handler. Give it a clock.Fake, the same one the client runs on, and the
// test decides when leases expire on both sides.
package clienttest
