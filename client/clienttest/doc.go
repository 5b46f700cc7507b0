// Package clienttest is for testing code that uses package client: Server
// is the real fencelock server run in-process behind a fault-injecting
// handler, and Clock is a clock that moves only when the test says, which
// both the client and the Server can run on.
package clienttest
