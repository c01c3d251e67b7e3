package sqlite

// Subscribe returns a channel that receives a value (coalesced, buffered 1) after each
// committed change on topic, and a function that ends the subscription; see
// approval.Notifier. A SQLite database has one writing process, so the signal never needs to
// leave it: it is sent in process (internal/signal), after the commit. Close closes every
// subscription's channel.
func (s *Store) Subscribe(topic string) (<-chan struct{}, func()) {
	return s.hub.Subscribe(topic)
}
