package postgres

import (
	"context"
	"time"

	"github.com/approvald/approval"
)

// The reads of approval.Store that both drivers run alike: each is one statement of
// internal/sqldb's, on the pool.

// Approvals implements approval.Store's Approvals with the statement of internal/sqldb.
func (s *Store) Approvals(ctx context.Context, f approval.ApprovalFilter) ([]*approval.Approval, string, error) {
	return s.shared.Approvals(ctx, f)
}

// ApprovalCounts implements approval.Store's ApprovalCounts with the statement of internal/sqldb.
func (s *Store) ApprovalCounts(ctx context.Context) (map[approval.Status]int, error) {
	return s.shared.ApprovalCounts(ctx)
}

// Backlog implements approval.Store's Backlog with the statement of internal/sqldb.
func (s *Store) Backlog(ctx context.Context) (approval.Backlog, error) {
	return s.shared.Backlog(ctx)
}

// Events implements approval.Store's Events with the statement of internal/sqldb.
func (s *Store) Events(ctx context.Context, approvalID string) ([]approval.Event, error) {
	return s.shared.Events(ctx, approvalID)
}

// Execution implements approval.Store's Execution with the statement of internal/sqldb.
func (s *Store) Execution(ctx context.Context, id string) (*approval.ExecutionRecord, error) {
	return s.shared.Execution(ctx, id)
}

// Executions implements approval.Store's Executions with the statement of internal/sqldb.
func (s *Store) Executions(ctx context.Context, f approval.ExecutionFilter) ([]*approval.ExecutionRecord, string, error) {
	return s.shared.Executions(ctx, f)
}

// ExecutionCounts implements approval.Store's ExecutionCounts with the statement of internal/sqldb.
func (s *Store) ExecutionCounts(ctx context.Context) (map[approval.ExecutionStatus]int, int, error) {
	return s.shared.ExecutionCounts(ctx)
}

// InboxEvent implements approval.Store's InboxEvent with the statement of internal/sqldb.
func (s *Store) InboxEvent(ctx context.Context, id string) (*approval.InboxEvent, error) {
	return s.shared.InboxEvent(ctx, id)
}

// InboxEvents implements approval.Store's InboxEvents with the statement of internal/sqldb.
func (s *Store) InboxEvents(ctx context.Context, f approval.InboxFilter) ([]*approval.InboxEvent, string, error) {
	return s.shared.InboxEvents(ctx, f)
}

// InboxCounts implements approval.Store's InboxCounts with the statement of internal/sqldb.
func (s *Store) InboxCounts(ctx context.Context) (map[approval.InboxStatus]int, error) {
	return s.shared.InboxCounts(ctx)
}

// OutboxMessage implements approval.Store's OutboxMessage with the statement of internal/sqldb.
func (s *Store) OutboxMessage(ctx context.Context, id string) (*approval.OutboxMessage, []approval.OutboxAttempt, error) {
	return s.shared.OutboxMessage(ctx, id)
}

// OutboxMessages implements approval.Store's OutboxMessages with the statement of internal/sqldb.
func (s *Store) OutboxMessages(ctx context.Context, f approval.OutboxFilter) ([]*approval.OutboxMessage, string, error) {
	return s.shared.OutboxMessages(ctx, f)
}

// PersonEmails implements approval.Store's PersonEmails with the statement of internal/sqldb.
func (s *Store) PersonEmails(ctx context.Context, persons []string) (map[string]string, error) {
	return s.shared.PersonEmails(ctx, persons)
}

// PersonsByEmail implements approval.Store's PersonsByEmail with the statement of internal/sqldb.
func (s *Store) PersonsByEmail(ctx context.Context, email string) ([]string, error) {
	return s.shared.PersonsByEmail(ctx, email)
}

// Session implements approval.Store's Session with the statement of internal/sqldb.
func (s *Store) Session(ctx context.Context, id string) (*approval.Session, error) {
	return s.shared.Session(ctx, id)
}

// Token implements approval.Store's Token with the statement of internal/sqldb.
func (s *Store) Token(ctx context.Context, id string) (*approval.Token, error) {
	return s.shared.Token(ctx, id)
}

// Tokens implements approval.Store's Tokens with the statement of internal/sqldb.
func (s *Store) Tokens(ctx context.Context, f approval.TokenFilter) ([]*approval.Token, string, error) {
	return s.shared.Tokens(ctx, f)
}

// instant reads the clock once, at approval.Precision in UTC. Its receiver is a pointer, so
// that a method value (sqldb.Reads' Clock) sees a clock set after it was taken.
func (s *Store) instant() time.Time { return s.Now().UTC().Truncate(approval.Precision) }

// IdentityGroupMembers implements approval.Store's IdentityGroupMembers with the statement of internal/sqldb.
func (s *Store) IdentityGroupMembers(ctx context.Context, groups []string) ([]approval.IdentityGroup, error) {
	return s.shared.IdentityGroupMembers(ctx, groups)
}
