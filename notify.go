package approval

// The topics a Notifier signals.
const (
	TopicApprovals  = "approvals"  // an approval changed (wakes ?wait= long-polls)
	TopicInbox      = "inbox"      // an inbox event became due (stored or re-queued)
	TopicExecutions = "executions" // an execution became due (queued, retried, released)
	// TopicOutbox ("outbox", outbox.go): an outbox message became due.
)

// TopicApproval returns the topic of the changes of the approval id: "approvals/<id>". A
// topic "T/K" names the key K within topic T, and a signal on it wakes the subscribers of
// T/K and those of all of T; a signal on T itself (a change whose key is unknown, such as a
// PostgreSQL listener that reconnected and so may have missed some) wakes every subscriber of
// T and of all its keys. So a long-poll on one approval subscribes to TopicApproval(id) and
// is woken by that approval's changes, not by every change of every approval.
func TopicApproval(id string) string { return TopicApprovals + "/" + id }

// Notifier wakes workers and long-polls promptly when work appears. A signal is only a hint
// to look at the store again: it may be lost, duplicated or spurious, so every waiter also
// polls. SQLite signals within the process after commit; PostgreSQL sends NOTIFY right behind
// the COMMIT (so it is delivered to every replica once the change is visible) and the store
// owns one LISTEN connection, started on the first Subscribe and closed by Close.
type Notifier interface {
	// Subscribe returns a channel that receives (coalesced, buffered 1) a value after each
	// committed change on topic, and a function that ends the subscription (any number of
	// times, before or after Close). Ending a subscription leaves its channel open. The
	// store's Close closes every subscription's channel, and a subscription made after Close
	// gets a closed channel, so a receiver must check ok: a closed channel means the store is
	// gone, it is ready at once, and a select that keeps receiving from it spins. topic may
	// name a key within a topic (TopicApproval).
	Subscribe(topic string) (<-chan struct{}, func())
}
