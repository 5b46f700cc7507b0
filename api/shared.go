package api

// Semaphores and read/write locks (docs/PRIMITIVES.md). They are asked for
// on PathAcquire with AcquireRequest.Permits (a semaphore) or
// AcquireRequest.Mode (a read/write lock); every other call (extend,
// extend-batch, release, check, lock, locks) works on their holders as on
// exclusive leases, each holder by its own (key, holder, token).

// Kinds of key, as Lease.Kind and Error.Kind carry them ("" is exclusive).
const (
	KindExclusive = "exclusive"
	KindSemaphore = "semaphore"
	KindRWLock    = "rwlock"
)

// Modes of a read/write lock request and holder.
const (
	ModeRead  = "read"
	ModeWrite = "write"
)

// MaxPermits bounds AcquireRequest.Permits.
const MaxPermits = 1000

// CodeKindMismatch (409): the key exists (it has holders or waiters) as
// another kind, or as a semaphore of another number of permits; nothing
// changed. Error.Kind and Error.Permits say what the key is.
const CodeKindMismatch = "kind_mismatch"
