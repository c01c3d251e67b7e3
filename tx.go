package approval

import (
	"context"
	"time"
)

// Tx is one store transaction as the Service composes it: statements, no decisions. Each
// method is one statement of the store's dialect, named by what it touches, what it does and
// the guard that its SQL holds (River's driver executor is the model). The Service reads
// what a rule needs, decides in Go, and writes through these; the store may send the
// writes together with the commit (PostgreSQL does, in one round trip), so a write's failure
// can surface at Commit.
//
// Store.Begin opens one. The transaction's clock (Now) is read once, after the transaction
// holds its connection, and every comparison with expires_at or a lease inside it uses that
// value, never the database's own clock, so tests can move time.
type Tx interface {
	// Now is the instant the transaction runs at, at Precision in UTC.
	Now() time.Time
	// Commit commits the transaction, running any writes still queued first.
	Commit(ctx context.Context) error
	// Rollback ends the transaction without its changes; after Commit it does nothing, so
	// it can be deferred.
	Rollback(ctx context.Context) error

	// TokenGetForUpdate returns one token and locks it against every other transaction's
	// change until this one ends, or ENOTFOUND.
	TokenGetForUpdate(ctx context.Context, id string) (*Token, error)
	// TokenSetRevokedIfActive sets the token's revoked_at to Now, only while it is unset; the
	// caller holds the token's lock and has seen it unset, so anything else fails the
	// transaction.
	TokenSetRevokedIfActive(ctx context.Context, id string) error

	// ApprovalGetForUpdate returns one approval with its approvers, decisions (oldest first)
	// and execution, and locks it against every other transaction's change until this one
	// ends: the lock orders votes, cancels and expiries of one approval, and makes the
	// events' seq (max+1) safe. ENOTFOUND if there is none.
	ApprovalGetForUpdate(ctx context.Context, id string) (*Approval, error)
	// ApprovalGetForUpdateMany is ApprovalGetForUpdate for several distinct approvals at
	// once: it returns those of ids that exist, in no particular order, each with its
	// approvers, decisions and execution, locked in the order of their ids, so that
	// transactions locking overlapping sets wait for each other and never deadlock.
	ApprovalGetForUpdateMany(ctx context.Context, ids []string) ([]*Approval, error)
	// ApprovalGetByIDMany returns the approvals with the given ids, each with its approvers,
	// decisions (oldest first) and execution, in no particular order; an id with no approval
	// is left out.
	ApprovalGetByIDMany(ctx context.Context, ids []string) ([]*Approval, error)
	// ApprovalIDsByOperationKey returns the ids of up to limit approvals made under key, by
	// any requester.
	ApprovalIDsByOperationKey(ctx context.Context, key string, limit int) ([]string, error)
	// ApprovalSetStatusIfPending is the one conditional write of invariant 1: it sets the
	// status and decided_at of the approval and adds one to its version, only while it is
	// pending and (for any status but expired) expires_at > Now, or (for expired)
	// expires_at <= Now. When the guard fails the transaction fails: the caller holds the
	// approval's lock, so that is a broken invariant, never a race to report. A status other
	// than pending deletes whom the approval asks (Ask): it asks nobody any more.
	ApprovalSetStatusIfPending(ctx context.Context, id string, status Status, decidedAt *time.Time) error
	// ApprovalIDsDueForUpdate returns the ids of up to limit pending approvals whose
	// expires_at <= Now, oldest expiry first, and locks them until the transaction ends.
	// Approvals another transaction holds are skipped, not waited for (PostgreSQL; SQLite's
	// single writer has none).
	ApprovalIDsDueForUpdate(ctx context.Context, limit int) ([]string, error)
	// ApprovalRemindDueForUpdate returns up to limit pending approvals whose remind_at <= Now,
	// the soonest due first, each with its stage_started_at (its created_at when unset), and
	// locks them until the transaction ends. Approvals another transaction holds are skipped,
	// not waited for (PostgreSQL; SQLite's single writer has none).
	ApprovalRemindDueForUpdate(ctx context.Context, limit int) ([]ReminderDue, error)
	// ApprovalSetReminder sets the approval's stage_started_at and remind_at (nil: none due).
	// The caller holds its lock: an approval that does not exist fails the transaction.
	ApprovalSetReminder(ctx context.Context, id string, stageStartedAt time.Time, remindAt *time.Time) error
	// ApprovalAskReplace replaces whom the pending approval id, created at createdAt, asks
	// (Ask) with asks; none removes them all. The caller holds its lock.
	ApprovalAskReplace(ctx context.Context, id string, createdAt time.Time, asks []Ask) error
	// ApprovalIDsWithoutAsksForUpdate returns up to limit pending approvals under a policy
	// that ask nobody (Service.RestoreAsks), and locks them until the transaction ends;
	// approvals another transaction holds are skipped (PostgreSQL).
	ApprovalIDsWithoutAsksForUpdate(ctx context.Context, limit int) ([]string, error)
	// DecisionInsertIfPending writes one vote, as one statement where the store can: it
	// appends v.Events to the approval's trail (seq max+1 onwards, at Now, in the order
	// given; the first is the EventVoted that orders the decision), inserts v.Vote (one per
	// approver: a second fails the transaction), sets the approval's status to v.Status and
	// decided_at to v.DecidedAt and adds one to its version, only while it is pending and
	// expires_at > Now, and inserts v.Execution when set (as ExecutionInsert). The caller
	// holds the approval's lock and has checked the guard, so a guard that fails fails the
	// transaction, as in ApprovalSetStatusIfPending. A v.Status other than pending deletes
	// whom the approval asks, as there.
	DecisionInsertIfPending(ctx context.Context, v VoteWrite) error
	// DecisionInsert records an approver's vote; the approval's events must already hold the
	// approval.voted event that records it (decisions are ordered by it).
	DecisionInsert(ctx context.Context, approvalID string, d Decision) error
	// EventInsert appends the approval's next event (seq max+1, at Now).
	EventInsert(ctx context.Context, approvalID, typ, actor string, cause Cause, detail map[string]any) error
	// EventInsertMany appends one event per element of events (ApprovalID, Type, Actor,
	// Cause and Detail; Seq and At are the store's): each the next of its approval's trail
	// (seq max+1, at Now), several of one approval in the order given. The caller holds
	// every approval's lock.
	EventInsertMany(ctx context.Context, events []Event) error
	// Notify signals topic to every subscriber once the transaction commits.
	Notify(ctx context.Context, topic string) error

	// ExecutionInsert inserts an execution record (ID, ApprovalID, OperationKey,
	// DownstreamKey, Action, Targeted, Status, LastError, NextAttemptAt set; created and updated at Now).
	ExecutionInsert(ctx context.Context, rec *ExecutionRecord) error
	// ExecutionClaimDue claims up to limit due executions: running ones whose lease has
	// expired (lease_expires_at <= Now) first, the longest expired first, then queued ones
	// whose next attempt is due (next_attempt_at <= Now), oldest due first; never a running
	// one without a lease. An expired one whose attempt had started its call (its
	// unsent_attempt is not its attempt) is returned as Recovered, one whose call never
	// started as Abandoned. Each is set running, attempts+1 (the claim's Attempt),
	// unsent_attempt to that attempt, next_attempt_at cleared, lease until leaseUntil,
	// updated at Now, and returned as it now is, with its Approval (approvers, decisions, and
	// the execution as claimed): the body of the call, read in the same statement where the
	// store can. The claimed executions and their approvals stay locked until
	// the transaction ends, and claims racing in several transactions take disjoint rows
	// without waiting for each other (PostgreSQL skips the rows another transaction holds;
	// SQLite's single writer orders them).
	ExecutionClaimDue(ctx context.Context, limit int, leaseUntil time.Time) ([]*ExecutionClaim, error)
	// ExecutionSetLeaseIfAttempt sets the lease of the execution id to leaseUntil, only while
	// attempt is its current attempt, it is running and its lease is set (a running execution
	// without a lease is an accepted async call: no attempt holds it any more), and reports
	// whether it did. The caller holds no lock: a guard that fails is a lost claim, not a
	// broken invariant, and the transaction goes on.
	ExecutionSetLeaseIfAttempt(ctx context.Context, id string, attempt int, leaseUntil time.Time) (bool, error)
	// ExecutionSetSendingIfAttemptMany marks the calls of several attempts as started, the
	// attempt attempts[i] of the execution ids[i], distinct executions all: it clears
	// unsent_attempt and sets the lease to leaseUntil, each only under the guard of
	// ExecutionSetLeaseIfAttempt (the attempt current, running, its lease set), and returns
	// the ids it marked, in no particular order. The caller holds no lock: a guard that
	// fails is a lost claim, not a broken invariant, and the transaction goes on.
	ExecutionSetSendingIfAttemptMany(ctx context.Context, ids []string, attempts []int, leaseUntil time.Time) ([]string, error)
	// ExecutionGetForUpdate returns one execution and locks it against every other
	// transaction's change until this one ends, in the lock order of every execution change:
	// its approval's row first (the lock that makes the events' seq safe), then the
	// execution's. ENOTFOUND if there is none.
	ExecutionGetForUpdate(ctx context.Context, id string) (*ExecutionRecord, error)
	// ExecutionGetForUpdateMany is ExecutionGetForUpdate for several executions at once: it
	// returns those of ids that exist, in no particular order, locked with their approvals in
	// the lock order, the approvals' rows first, and within each kind in the order of their
	// ids, so that transactions locking overlapping sets wait for each other and never
	// deadlock.
	ExecutionGetForUpdateMany(ctx context.Context, ids []string) ([]*ExecutionRecord, error)
	// ExecutionGetByApprovalForUpdate is ExecutionGetForUpdate for the execution of an
	// approval: ENOTFOUND if the approval does not exist or has none.
	ExecutionGetByApprovalForUpdate(ctx context.Context, approvalID string) (*ExecutionRecord, error)
	// ExecutionIDsByOperationKey returns the ids of up to limit executions made under key, of
	// any action and requester.
	ExecutionIDsByOperationKey(ctx context.Context, key string, limit int) ([]string, error)
	// ExecutionUpdateIfAttempt writes rec's state (status, attempts, last_error, result,
	// next_attempt_at, lease_expires_at, applied_version, uncertain, attempt_base; updated at
	// Now) to the execution rec.ID, only while attempt is its current attempt and it is
	// running: the fence of a runner's attempt. The caller holds the execution's lock
	// (ExecutionGetForUpdate) and has checked the fence, so a guard that fails is a broken
	// invariant: the transaction fails.
	ExecutionUpdateIfAttempt(ctx context.Context, rec *ExecutionRecord, attempt int) error
	// ExecutionUpdateIfAttemptMany is ExecutionUpdateIfAttempt for several executions, recs[i]
	// fenced by attempts[i], distinct executions all: the caller holds every lock and has
	// checked every fence, so one guard that fails fails the transaction.
	ExecutionUpdateIfAttemptMany(ctx context.Context, recs []*ExecutionRecord, attempts []int) error
	// ExecutionUpdateIfStatus writes rec's state as ExecutionUpdateIfAttempt does, only while
	// the execution is in status, as the caller read it under its lock; the transaction fails
	// otherwise.
	ExecutionUpdateIfStatus(ctx context.Context, rec *ExecutionRecord, status ExecutionStatus) error

	// TokenInsert inserts a token record, its name, expiry, last use and revocation
	// included; a duplicate id or hash is ECONFLICT, at the latest from Commit.
	TokenInsert(ctx context.Context, t Token) error
	// BootstrapInsert marks the database as bootstrapped, with the token tokenID, and reports
	// whether this transaction did: false if it was marked before. Of transactions racing to
	// mark it, one does; the others wait for its commit and then find it marked.
	BootstrapInsert(ctx context.Context, tokenID string) (bool, error)

	// InboxGetForUpdate returns one inbox event without its body, locked until the
	// transaction ends, or ENOTFOUND.
	InboxGetForUpdate(ctx context.Context, id string) (*InboxEvent, error)
	// InboxSetDone marks a pending event handled (status processed, ignored or stale) with
	// its outcome and the approval it touched, clears its lease, and returns it with its
	// body.
	InboxSetDone(ctx context.Context, id string, status InboxStatus, outcome string, approvalID string) (*InboxEvent, error)
	// InboxMarkDoneMany is InboxSetDone for several distinct events at once, without the
	// read: a write whose answer the rules do not need (on PostgreSQL one statement, which
	// travels with the next); one event no longer pending fails the transaction.
	InboxMarkDoneMany(ctx context.Context, marks []InboxMark) error
	// InboxSetAttemptFailed records a failed attempt of a pending event: its status (pending
	// again, or failed), last_error, next_attempt_at and processed_at, and clears its lease.
	// The caller holds the event's lock and has checked that it is pending: the transaction
	// fails otherwise.
	InboxSetAttemptFailed(ctx context.Context, id string, status InboxStatus, lastError string, nextAttemptAt, processedAt *time.Time) error
	// InboxSetPendingIfFailed puts a failed event back in the queue: pending, due at Now,
	// processed_at and lease cleared, attempts and last error kept. It returns the event with
	// its body; the caller holds its lock and has checked that it is failed.
	InboxSetPendingIfFailed(ctx context.Context, id string) (*InboxEvent, error)
	// InboxClaimDue claims up to limit pending events whose next attempt is due
	// (next_attempt_at <= Now) and which no live lease holds (lease_token empty or
	// lease_expires_at <= Now): each gets the lease token claim+":"+its id, a lease until
	// leaseUntil and attempts+1, and is returned with its body, oldest received first. Claims
	// racing in several transactions take disjoint events without waiting (PostgreSQL skips
	// the rows another transaction holds; SQLite's single writer orders them).
	InboxClaimDue(ctx context.Context, limit int, leaseUntil time.Time, claim string) ([]*InboxEvent, error)
	// InboxLockDue locks, until the transaction ends, up to limit of the events InboxClaimDue
	// would claim (pending, due, no live lease), and returns them with their bodies, oldest
	// due first, changing nothing: the transaction's lock is the claim, for a caller that
	// applies them and marks them done before it commits. Transactions racing take disjoint
	// events without waiting, as claims do.
	InboxLockDue(ctx context.Context, limit int) ([]*InboxEvent, error)
	// InboxDeleteHandled deletes up to limit handled events (processed, ignored or stale)
	// received before receivedBefore, oldest first, and returns how many. Events another
	// transaction holds are skipped, not waited for.
	InboxDeleteHandled(ctx context.Context, receivedBefore time.Time, limit int) (int, error)
	// InboxClearBodyHandled clears the body of up to limit handled events received before
	// receivedBefore that still have one, oldest first, skipping those another transaction
	// holds, and returns how many.
	InboxClearBodyHandled(ctx context.Context, receivedBefore time.Time, limit int) (int, error)

	// OutboxInsert inserts a message (every field but attempts, lease, error and sent_at as
	// given), unless one with its NaturalKey exists: then it inserts nothing, and is no error.
	// Of racing inserts under one key exactly one inserts.
	OutboxInsert(ctx context.Context, m *OutboxMessage) error
	// OutboxClaimDue claims up to limit due messages, the oldest due: pending ones whose
	// next_attempt_at <= Now, and sending ones whose lease has expired. Each is set sending,
	// attempts+1, next_attempt_at cleared, lease until leaseUntil, updated at Now, gets an
	// attempt row (started at Now), and is returned as it now is, oldest first (created_at,
	// then id). Claims racing in several transactions take disjoint rows without waiting
	// (PostgreSQL skips locked rows; SQLite's single writer orders them).
	OutboxClaimDue(ctx context.Context, limit int, leaseUntil time.Time) ([]*OutboxMessage, error)
	// OutboxGetForUpdate returns one message, locked until the transaction ends, or
	// ENOTFOUND.
	OutboxGetForUpdate(ctx context.Context, id string) (*OutboxMessage, error)
	// OutboxUpdateIfAttempt writes m's state (status, payload, last_error, next_attempt_at,
	// lease_expires_at, sent_at; updated at Now) only while attempt is its current attempt and
	// it is sending. The caller holds its lock and checked the fence: a failed guard fails
	// the transaction.
	OutboxUpdateIfAttempt(ctx context.Context, m *OutboxMessage, attempt int) error
	// OutboxUpdateIfStatus writes m's state as OutboxUpdateIfAttempt does, only while the
	// message is in status; the transaction fails otherwise.
	OutboxUpdateIfStatus(ctx context.Context, m *OutboxMessage, status OutboxStatus) error
	// OutboxAttemptFinish records the outcome and error of one attempt of a message.
	OutboxAttemptFinish(ctx context.Context, id string, attempt int, outcome, errText string) error

	// SigninAskCountsForUpdate returns the counts a request for a sign-in link is judged by
	// (SigninCounts), and holds p.Subject's links against other transactions' requests until
	// this one ends, so that the counts and the inserts after them are exact. PostgreSQL
	// takes a transaction-scoped advisory lock on the subject, or on the client when the
	// subject is "" (a request that matched nobody then queues behind nobody else's);
	// SQLite's single writer orders every request by itself.
	SigninAskCountsForUpdate(ctx context.Context, p SigninCountParams) (SigninCounts, error)
	// SigninAskInsert records a request for a sign-in link for subject ("" for nobody) from
	// client, made at Now.
	SigninAskInsert(ctx context.Context, subject, client string) error
	// SigninAskDeleteBefore deletes up to limit requests made before createdBefore and
	// returns how many.
	SigninAskDeleteBefore(ctx context.Context, createdBefore time.Time, limit int) (int, error)
	// SigninTokenInsert stores a sign-in link's hash for subject, made at Now and expiring at
	// expiresAt.
	SigninTokenInsert(ctx context.Context, hash []byte, subject string, expiresAt time.Time) error
	// SigninTokenUseIfValid marks the link with hash used at Now, only while it is unused and
	// expires_at > Now, and returns its subject; ENOTFOUND when the guard fails or there is
	// no such link. Of racing uses of one link exactly one succeeds.
	SigninTokenUseIfValid(ctx context.Context, hash []byte) (string, error)
	// SigninTokenDeleteExpired deletes up to limit links made before createdBefore whose
	// expires_at <= Now, used or not, skipping those another transaction holds (a link being
	// used), and returns how many.
	SigninTokenDeleteExpired(ctx context.Context, createdBefore time.Time, limit int) (int, error)

	// SessionInsert stores a new page session (every field but EndedAt and Token).
	SessionInsert(ctx context.Context, sess *Session) error
	// SessionSetEndedIfLive sets the session's ended_at to Now, only while it is unset, and
	// returns how many sessions it ended (0 or 1).
	SessionSetEndedIfLive(ctx context.Context, id string) (int, error)
	// SessionSetEndedIfLiveBySubject sets ended_at to Now on every session of subject where
	// it is unset, and returns how many it ended.
	SessionSetEndedIfLiveBySubject(ctx context.Context, subject string) (int, error)
	// SessionDeleteExpired deletes up to limit sessions whose expires_at is before
	// expiredBefore, ended or not, and returns how many.
	SessionDeleteExpired(ctx context.Context, expiredBefore time.Time, limit int) (int, error)

	// SecretInsertIfAbsent stores value as the secret named name, made at Now, only when no
	// secret has that name; otherwise it changes nothing (a concurrent insert of the same
	// name waits for the other transaction and then changes nothing).
	SecretInsertIfAbsent(ctx context.Context, name string, value []byte) error
	// SecretGet returns the secret named name, or ENOTFOUND.
	SecretGet(ctx context.Context, name string) ([]byte, error)

	// PersonEmailGetMany returns the addresses stored for the persons (Store.PersonEmails),
	// person to address; persons without one are absent.
	PersonEmailGetMany(ctx context.Context, persons []string) (map[string]string, error)
	// PersonEmailUpsert stores email as person's address, at Now, replacing the stored one;
	// when it is the stored one already, nothing changes.
	PersonEmailUpsert(ctx context.Context, person, email string) error

	// IdentityGroupGetMany returns the identity-provider groups stored for the persons at
	// their last OIDC sign-in (Service.RecordIdentityGroups), person by person and group by
	// group in name order; persons with none are absent. The vote reads its voters' groups
	// with it, in its own transaction.
	IdentityGroupGetMany(ctx context.Context, persons []string) ([]IdentityGroup, error)
	// IdentityGroupReplace replaces every stored group of person with groups (distinct
	// names), each signed in at Now: the rows of groups no longer named are deleted, even
	// when groups is empty, and other persons' rows are left as they are.
	IdentityGroupReplace(ctx context.Context, person string, groups []string) error

	// SlackMessageInsert records a message posted in Slack for an outbox notification, at
	// Now, unless one is recorded for it already (ON CONFLICT DO NOTHING: the first stands).
	SlackMessageInsert(ctx context.Context, m SlackMessage) error
	// SlackMessageGet returns the message recorded for the notification outboxID, or
	// ENOTFOUND.
	SlackMessageGet(ctx context.Context, outboxID string) (SlackMessage, error)
	// SlackMessageGetMany returns every message recorded for an approval, by notification id.
	SlackMessageGetMany(ctx context.Context, approvalID string) ([]SlackMessage, error)
	// SlackUserUpsert stores userID as person's Slack user, at Now, replacing the stored one;
	// when it is the stored one already, nothing changes.
	SlackUserUpsert(ctx context.Context, person, userID string) error
	// SlackUserGet returns person's stored Slack user, "" when none.
	SlackUserGet(ctx context.Context, person string) (string, error)
	// SlackUserPersons returns the persons whose stored Slack user is userID, by name.
	SlackUserPersons(ctx context.Context, userID string) ([]string, error)
}

// VoteWrite is what a vote writes (Tx.DecisionInsertIfPending): the rules decided it all.
type VoteWrite struct {
	ApprovalID string
	// Vote is the decision; its At is the transaction's Now.
	Vote Decision
	// Events are appended in order; the first is the vote's EventVoted. Their ApprovalID,
	// Seq and At are the store's.
	Events []Event
	// Status and DecidedAt are the approval's after the vote: pending with no DecidedAt, or
	// terminal with Now.
	Status    Status
	DecidedAt *time.Time
	// Execution, when set, is the execution the approval gets by being approved.
	Execution *ExecutionRecord
}
