package peerbench

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/fencelock/fencelock/internal/testguard"
)

// The drivers start goroutines (keep-alive streams, ZooKeeper event
// drains); closing a system or client must end them. gRPC and the etcd
// client keep a few process-wide goroutines that are not ours.
//
// Every system's default address points at a tripwire: a test that falls
// back to a default fails the run instead of writing into whatever listens
// there (a user's dev server on 127.0.0.1:7470, a peer of setup.sh).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(testguard.Wrap(m, func(t *testguard.Tripwire) {
		for name := range DefaultAddrs {
			DefaultAddrs[name] = t.Addr()
		}
	}),
		goleak.IgnoreTopFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
	)
}
