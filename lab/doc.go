// Package lab is the c11 hands-on page as a program: six blocks that each
// show one step from "a lock" to "a lock you can trust", and an assembly that
// measures four designs against each other.
//
// Blocks 2, 3 and 4 and the assembly's replays run on fencelock's own lock
// table (internal/locktable) and resource fence (package fence), so what the
// lab teaches is what the product does. The two simulations (block 5 and the
// assembly) draw from internal/pyrand, a port of CPython's random.Random, so
// with the default Config every figure equals the page's, and a different
// seed or operation count moves the figures exactly as it would move the
// page's Python.
//
// Verify re-derives the page's claims with its own small models, sharing no
// code with the blocks, so a bug in a block cannot make its own claim pass.
//
// Nothing here reads a clock, starts a goroutine, or panics on input.
package lab
