package locktable

// RaiseLastToken makes floor the last token issued if it is above the
// current one, so that the next grant carries at least floor+1. It never
// lowers the counter and touches nothing else. It reports whether the
// counter moved. Operators use it (through a committed command) after
// repairing a damaged log, to skip every token that may have been issued
// before the damage.
func (t *Table) RaiseLastToken(floor uint64) bool {
	if floor <= t.last {
		return false
	}
	t.last = floor
	return true
}
