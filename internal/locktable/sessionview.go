package locktable

// LeaseSession returns the id of the session that key's lease is held
// under, when key has a live exclusive lease under one at now. It only
// reads; a dashboard finds the sessions of the leases it lists through it
// without walking every session of the table.
func (t *Table) LeaseSession(key string, now Time) (uint64, bool) {
	e := t.keys.get(key)
	if e == nil || e.multi || e.holder == nil || e.holder.sess == nil || !e.alive(now) {
		return 0, false
	}
	return e.holder.sess.id, true
}
