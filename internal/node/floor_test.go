package node

import (
	"errors"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/replica"
)

// A token past a reservation that failed is never covered: the waiter
// handed that grant from the queue is not answered with it (the service
// asks Covered first), and neither is any later proposal (durableErr).
func TestCoveredRefusesTokensPastAFailedReservation(t *testing.T) {
	state, err := openStateFile(OSFS{}, t.TempDir(), dirState{CRCFrom: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer state.close()
	floor := newTokenFloor(state)
	n := &Storage{floor: floor}
	m := newMachine(fsm.New(nil), floor, Hooks{})
	m.ApplyBatch(acquireEntries(t, 1, 1))
	if err := n.Covered(1, time.Second); err != nil {
		t.Fatalf("token 1 after a good reservation: %v", err)
	}
	floor.ceiling.Store(1)
	floor.raiseHook = func(uint64) error { return errors.New("planted fsync failure") }
	m.ApplyBatch(acquireEntries(t, 3, 1)) // token 2 needs a new reservation
	if err := n.Covered(2, time.Second); err == nil || !errors.Is(err, replica.ErrUnavailable) {
		t.Fatalf("token 2 past a failed reservation: %v", err)
	}
	if err := m.FloorErr(); err == nil {
		t.Fatal("the node would answer proposals after a failed reservation")
	}
}
