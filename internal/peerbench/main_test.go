package peerbench

import (
	"testing"

	"go.uber.org/goleak"
)

// The drivers start goroutines (keep-alive streams, ZooKeeper event
// drains); closing a system or client must end them. gRPC and the etcd
// client keep a few process-wide goroutines that are not ours.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
	)
}
