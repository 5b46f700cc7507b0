package membership

import (
	"fmt"
	"sync"
)

// JoinStatus is what a node started to join a cluster (server --join)
// knows of its join while it is not yet a member: whoever asks the cluster
// to add it says how that goes (Set), and /readyz answers it instead of
// "knows no leader yet". Safe for concurrent use; the zero value says
// nothing.
type JoinStatus struct {
	mu  sync.Mutex
	msg string
}

// Set says how the join goes now.
func (j *JoinStatus) Set(format string, args ...any) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.msg = fmt.Sprintf(format, args...)
}

// Clear says nothing more: the node is a member.
func (j *JoinStatus) Clear() { j.Set("") }

// String is what Set said last ("" when nothing, or after Clear).
func (j *JoinStatus) String() string {
	if j == nil {
		return ""
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.msg
}
