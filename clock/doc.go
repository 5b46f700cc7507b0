// Package clock is the time source fencelock measures leases and
// schedules lease work by, on the server and in the client: System in
// production, and Fake, which moves only when a test says, for tests.
//
// One Fake can drive a client and the server it talks to, so that a test
// decides exactly which deadlines have passed on both sides. The server
// is given the Fake's Uncounted view: its timers (lease expiry, waits)
// run when the test advances the clock like any other, but Pending, Next
// and Scheduled leave them out, so those count the timers of the code
// under test alone.
package clock
