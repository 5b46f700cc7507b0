package service

// Waiters returns the holders queued on key, head first, as this node has
// applied them. It only reads; the client's test double (client/clienttest)
// uses it to wait for a request to have queued.
func (s *Service) Waiters(key string) []string { return s.fsm.Waiters(key) }
