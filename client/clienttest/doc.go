// Package clienttest is for testing code that uses package client: Server
// is the real fencelock server run in-process, answering HTTP, framed
// requests and binary calls on one port as a real node does, behind one
// front that injects faults and records arrivals the same way for all
// three. Give it a clock.Fake, the same one the client runs on, and the
// test decides when leases expire on both sides.
package clienttest
