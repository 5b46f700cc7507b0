package server

// Waiters names the holders queued for key, head first, as this node's
// applied state has them. It is read-only and for tests (a client's test
// double waits with it for a wait to be queued before it advances a fake
// clock); it is not part of the API.
func (s *Server) Waiters(key string) []string {
	var out []string
	for _, q := range s.fsm.QueuedWaiters() {
		if q.Key == key {
			out = append(out, q.Holder)
		}
	}
	return out
}
