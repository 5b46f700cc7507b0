// Package simclock is the simulation's clocks: each process of a world
// (internal/sim) reads a clock of its own, virtual time (a synctest
// bubble's) at a drifting rate, which a pause stops from running
// anything; the world's clocks share one Dues, so that no two timers of
// the world fall due at one instant.
package simclock
