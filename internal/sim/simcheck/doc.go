// Package simcheck judges what a simulated world recorded: the committed
// log as its nodes applied it (audited by a state machine and by a model of
// its own, the ledger), what its clients were answered and acted under,
// what its watcher was told, and the prober's calls against the porcupine
// models. It knows nothing of how the world runs: the world (internal/sim)
// hands it records and it reports what it finds (Reporter).
package simcheck
