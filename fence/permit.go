package fence

import "strconv"

// PermitResource names the resource a semaphore permit is fenced on: one
// per slot. fencelock numbers a semaphore's permits 1..N (the lease's
// slot); a permit's holders, one after another, take increasing tokens,
// so each slot is fenced as an exclusive lock is: Admit(ctx,
// PermitResource(name, slot), token, effect) refuses a holder of the slot
// whose permit has passed to someone who has acted since. The resource
// then never admits more than N current permits at once, whatever the
// pauses of holders that lost theirs.
func PermitResource(resource string, slot int) string {
	return resource + "#permit-" + strconv.Itoa(slot)
}
