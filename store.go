package approval

import (
	"context"
	"time"
)

// Store is approvald's durable state. Two implementations exist, sqlite.Store and
// postgres.Store, and both pass the conformance suite in storetest. Every method is one
// transaction. No correctness rests on process memory: any number of processes may share one
// PostgreSQL database.
//
// Time: each store has a clock (its Now field, time.Now by default) and every method reads it
// once at the start of its transaction, after the transaction has begun (never before waiting
// for a connection, which would let a queued write act on an instant already past); all
// comparisons with expires_at and lease times use that value, never the database's own clock,
// so tests can move time.
type Store interface {
	InboxStore
	ExecutionStore
	OutboxStore
	Notifier
	SessionStore

	// InsertApproval writes a new approval under its operation key, all in one transaction:
	// a (ID, Version 1, Status pending, CreatedAt, ExpiresAt, OperationKey and Fingerprint
	// filled in by the caller), its approvers, whom it asks (Approval.Asks), an EventCreated event (seq 1, actor =
	// requester, cause) and the outbox messages (the approvers' notifications; see
	// Tx.OutboxInsert). A crash leaves all of it or none. The approval row is the key's
	// record: it keeps the fingerprint, and the create's answer is rendered again from it
	// (Approval.AsCreated), so no response is stored beside it (docs/architecture.md, "What a
	// create writes").
	//
	// It writes nothing when the key is already held, and returns the holder instead: the
	// approval made under the key, its fingerprint and current state. Of concurrent inserts
	// under one key exactly one writes; the others wait for its commit and return it as the
	// holder. The store makes no decision about the holder: comparing fingerprints is the
	// Service's rule (see Service.Create).
	InsertApproval(ctx context.Context, a *Approval, cause Cause, outbox []*OutboxMessage) (*KeyHolder, error)

	// Approval returns one approval with its decisions (oldest first) and execution, or
	// ENOTFOUND.
	//
	// Approval, InsertApproval and Begin run the pending TokenCheck of ctx, if any, in their
	// first round trip, and answer its refusal (EUNAUTHORIZED), having read and written
	// nothing for the request, when the token is no longer good.
	Approval(ctx context.Context, id string) (*Approval, error)

	// Approvals lists approvals newest first (created_at, then id, descending) matching f, and
	// the cursor of the next page ("" on the last page).
	Approvals(ctx context.Context, f ApprovalFilter) ([]*Approval, string, error)

	// Begin opens a transaction for the Service to compose a rule in (see Tx).
	Begin(ctx context.Context) (Tx, error)

	// ApprovalCounts returns how many approvals are in each status (for /metrics).
	ApprovalCounts(ctx context.Context) (map[Status]int, error)

	// Backlog counts the rows in the backlog statuses (BacklogStatuses, BacklogInboxStatuses,
	// BacklogExecutionStatuses) and the running executions past their lease, in one
	// statement. Each count is an index range of its status, so it costs what waits, however
	// many approvals, events and executions are done: /metrics reads it at every scrape.
	Backlog(ctx context.Context) (Backlog, error)

	// Events returns an approval's audit trail, oldest first, or ENOTFOUND.
	Events(ctx context.Context, approvalID string) ([]Event, error)

	// TokenByHash finds the token with the given hash, revoked or expired ones included, or
	// ENOTFOUND. It is one statement on the unique index of the hash: Service.Authenticate
	// runs it on a token's first use, and whenever no TokenCheck can ride with the request. Tokens are written by Service.CreateToken, RotateToken,
	// RevokeToken and Bootstrap.
	TokenByHash(ctx context.Context, hash []byte) (*Token, error)
	// Token returns one token, or ENOTFOUND.
	Token(ctx context.Context, id string) (*Token, error)
	// Tokens lists tokens newest first (created_at, then id, descending), and the cursor of
	// the next page ("" on the last page).
	Tokens(ctx context.Context, f TokenFilter) ([]*Token, string, error)
	// TokenSetLastUsedIfOlder sets the token's last_used_at to the store's now, only where it
	// is unset or older than now-every: of many requests in a minute on any number of
	// replicas, one writes. An unknown id changes nothing and is no error.
	TokenSetLastUsedIfOlder(ctx context.Context, id string, every time.Duration) error

	// IdentityGroupMembers returns the stored memberships (Tx.IdentityGroupGetMany) of the
	// identity-provider groups named, by group, then person, in name order: one statement on
	// the index of the group.
	IdentityGroupMembers(ctx context.Context, groups []string) ([]IdentityGroup, error)

	// Ping checks that the database answers. A database that cannot be reached is reported,
	// by this and every other method, as an EUNAVAILABLE error (503), never as success.
	Ping(ctx context.Context) error
	// HeartbeatUpdate checks that the database takes a write: it writes the one row of the
	// heartbeat table in a transaction of its own and commits. A database that answers but
	// cannot write (a full disk, a read-only database, a PostgreSQL in recovery) fails it as
	// EUNAVAILABLE.
	HeartbeatUpdate(ctx context.Context) error
	// DatabaseTime reads the database's own clock, which leases would be judged by if every
	// replica agreed with it (ClockWatch). SQLite, which runs inside this process, answers
	// this machine's clock (time.Now, not the store's Now).
	DatabaseTime(ctx context.Context) (time.Time, error)
	// Incarnation names the database server incarnation the store talks to, read without a
	// round trip of its own: a change means that the store may now talk to another server,
	// one that lacks commits acknowledged before (a PostgreSQL failover to an asynchronous
	// standby, a restore from a backup). The Service replays a create from its memory only
	// while it does not change (see recentKeys). PostgreSQL: read by each new connection as
	// it opens, "" before the first. SQLite, one file opened by one process: a constant.
	Incarnation() string
	// Close releases the store's connections.
	Close() error
}

// ApprovalFilter selects approvals for Approvals.
type ApprovalFilter struct {
	Status   Status // "" for any
	Approver string // "" for any: approvals listing this approver
	// VisibleTo, when set, keeps only approvals whose requester is VisibleTo or which list
	// VisibleTo as an approver.
	VisibleTo string
	// NotVotedBy, when set, keeps only approvals on which NotVotedBy has cast no vote ("waiting
	// for me" is Status pending, Approver and NotVotedBy the viewer).
	NotVotedBy string
	// AskedOf, when set, keeps only pending approvals that ask AskedOf now (docs/policies.md,
	// "Waiting for me"): those whose asks (Ask, kept while pending) name AskedOf as a person or
	// one of AskedGroups as a group, leaving out those under a policy that AskedOf requested.
	// Each name is read as a range of the asks' index, newest first, from the cursor, no
	// further than a page. Service.Waiting sets it.
	AskedOf     string
	AskedGroups []string
	// Decided, when true, keeps only approvals that are no longer pending ("decided
	// recently" on the approver's page).
	Decided   bool
	Requester string // "" for any: approvals this requester made
	Action    string // "" for any: approvals of exactly this action
	// Query, when set, keeps only approvals whose title contains it. ASCII letters match
	// whatever their case; every other character matches only itself (so % and _ too), on
	// both stores alike. It is at most MaxTitleLength characters of one line.
	Query  string
	Limit  int    // 1..MaxPageSize; 0 means DefaultPageSize
	Cursor string // from a previous page; a malformed cursor is InvalidCursor
}

// DecideRequest is one approver's vote.
type DecideRequest struct {
	ApprovalID string
	// OperationKey names the approval instead of ApprovalID (inbox decisions may carry either).
	// Operation keys are unique per requester only: a key shared by several requesters'
	// approvals is refused as ambiguous.
	OperationKey string
	Approver     string
	Verdict      Verdict
	Comment      string
	Cause        Cause
}
