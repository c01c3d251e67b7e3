package approval

// Page sizes of the listings (Approvals, Executions, InboxEvents).
const (
	DefaultPageSize = 50
	MaxPageSize     = 200
)

// PageLimit checks a listing's requested page size: 0 means DefaultPageSize, and anything
// outside 1..MaxPageSize is EINVALID. Both stores call it, so a listing answers alike on each.
func PageLimit(limit int) (int, error) {
	if limit == 0 {
		return DefaultPageSize, nil
	}
	if limit < 1 || limit > MaxPageSize {
		return 0, Errorf(EINVALID, "limit must be between 1 and %d", MaxPageSize)
	}
	return limit, nil
}

// The statuses of each kind, in lifecycle order: what a listing's status filter accepts and
// what the counts for /metrics report, zero included.
var (
	Statuses = []Status{StatusPending, StatusApproved, StatusRejected, StatusExpired, StatusCancelled}

	InboxStatuses = []InboxStatus{InboxPending, InboxProcessed, InboxIgnored, InboxStale, InboxFailed}

	ExecutionStatuses = []ExecutionStatus{
		ExecutionQueued, ExecutionRunning, ExecutionSucceeded, ExecutionFailed,
		ExecutionNeedsReview, ExecutionCancelled, ExecutionNotConfigured,
	}
)

// The statuses of the backlog: rows that wait for a worker or a person and leave the status
// when handled, so there are as many as the work waiting, not as the history. Every other
// status is final (or, for inbox events, kept until purged) and only grows with use.
var (
	BacklogStatuses          = []Status{StatusPending}
	BacklogInboxStatuses     = []InboxStatus{InboxPending, InboxFailed}
	BacklogExecutionStatuses = []ExecutionStatus{ExecutionQueued, ExecutionRunning, ExecutionNeedsReview}
)

// Backlog is what waits in the database, counted by status: see Store.Backlog. Every backlog
// status is present in its map, zero included.
type Backlog struct {
	Approvals  map[Status]int
	Inbox      map[InboxStatus]int
	Executions map[ExecutionStatus]int
	// Stuck is how many running executions are past their lease.
	Stuck int
}

// Check validates the filter of Approvals and returns its page size.
// Names given to filter by are only checked for what no store could compare (NUL, invalid
// UTF-8): a name stored before a limit existed stays listable. A search text is checked as the
// title it searches.
func (f ApprovalFilter) Check() (int, error) {
	if f.Status != "" && !f.Status.Valid() {
		return 0, Errorf(EINVALID, "unknown status %q", f.Status)
	}
	for _, name := range []struct{ field, value string }{
		{"approver", f.Approver}, {"visible_to", f.VisibleTo}, {"not_voted_by", f.NotVotedBy},
		{"requester", f.Requester}, {"action", f.Action}, {"asked_of", f.AskedOf},
	} {
		if err := CheckText(name.field, name.value); err != nil {
			return 0, err
		}
	}
	for _, g := range f.AskedGroups {
		if err := CheckText("asked group", g); err != nil {
			return 0, err
		}
	}
	if f.Query != "" {
		if err := CheckName("q", f.Query, MaxTitleLength); err != nil {
			return 0, err
		}
	}
	return PageLimit(f.Limit)
}

// Check validates the filter of InboxEvents and returns its page size.
func (f InboxFilter) Check() (int, error) {
	if f.Status != "" && !f.Status.Valid() {
		return 0, Errorf(EINVALID, "unknown inbox status %q", f.Status)
	}
	return PageLimit(f.Limit)
}

// Check validates the filter of Executions and returns its page size.
func (f ExecutionFilter) Check() (int, error) {
	if f.Status != "" && !f.Status.Valid() {
		return 0, Errorf(EINVALID, "unknown execution status %q", f.Status)
	}
	return PageLimit(f.Limit)
}
