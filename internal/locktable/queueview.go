package locktable

// QueueOf returns the first max waiters of key's queue, head first (all of
// them when max <= 0), and how many are queued on key in all. It only
// reads; a dashboard shows a page of keys with their queues through it
// without copying every queue of the table (QueuedWaiters).
func (t *Table) QueueOf(key string, max int) ([]Queued, int) {
	e := t.keys.get(key)
	if e == nil {
		return nil, 0
	}
	if e.multi {
		m := t.multi[key]
		n := len(m.waiters)
		if max > 0 && n > max {
			n = max
		}
		return m.queued(make([]Queued, 0, n), key, n), len(m.waiters)
	}
	ws := t.waitersOf(e)
	n := len(ws)
	if max > 0 && n > max {
		ws = ws[:max]
	}
	out := make([]Queued, len(ws))
	for i, w := range ws {
		out[i] = Queued{Key: key, Holder: w.holder, Since: w.since, Deadline: w.deadline}
		if w.sess != nil {
			out[i].Session = w.sess.id
		}
	}
	return out, n
}
