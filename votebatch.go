package approval

import (
	"context"
	"time"

	"github.com/approvald/approval/internal/batch"
)

// Votes that arrive together are cast together (internal/batch, as the stores' creates): at
// most voteBatches transactions of votes at once, of at most voteBatchMax votes each, each
// transaction given up after voteBatchTimeout whatever its callers' deadlines
// (docs/architecture.md, "Votes in batches").
const (
	voteBatches      = 2
	voteBatchMax     = 64
	voteBatchTimeout = 30 * time.Second
)

// voteCall is one vote handed to the Service's batcher: the request, checked already, and
// its request's pending token check, if any.
type voteCall struct {
	d     DecideRequest
	check *TokenCheck
}

// votes returns the Service's batcher of votes, made on first use.
func (s *Service) votes() *batch.Batcher[voteCall, decided] {
	s.votesOnce.Do(func() {
		s.voteBatcher = batch.New(voteBatches, voteBatchMax, s.voteBatch)
	})
	return s.voteBatcher
}

// VoteBatchStats returns what the Service's batcher of votes has run so far: transactions
// shared by votes, and votes in them (a vote cast alone counts as a batch of one).
func (s *Service) VoteBatchStats() (batches, calls uint64) {
	st := s.votes().Stats()
	return st.Batches, st.Calls
}

// castVote runs decide over d, checked already, in a transaction it commits: the one of the
// votes on other approvals that arrived meanwhile, or one of its own.
func (s *Service) castVote(ctx context.Context, d DecideRequest) (decided, error) {
	if d.ApprovalID == "" {
		// Named by its operation key, the approval is known only once read: it cannot be
		// kept apart from the batch's other approvals beforehand.
		return s.voteAlone(ctx, d)
	}
	return s.votes().Do(ctx, voteCall{d: d, check: PendingTokenCheck(ctx)})
}

// voteAlone runs decide over d in a transaction of its own, which runs ctx's token check.
func (s *Service) voteAlone(ctx context.Context, d DecideRequest) (decided, error) {
	tx, err := s.Store.Begin(ctx)
	if err != nil {
		return decided{}, err
	}
	defer tx.Rollback(ctx)
	res, err := s.decide(ctx, tx, d)
	if err != nil {
		return decided{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return decided{}, err
	}
	return res, nil
}

// voteBatch casts a batch of votes: those on distinct approvals in one transaction
// (voteTogether), every other vote on an approval already in it alone afterwards, one
// transaction each, so that two votes on one approval never share a transaction's lock. When
// the shared transaction fails, nothing of it committed: a vote whose token was refused is
// answered so, and every other vote is cast again alone, so that one vote's failure is its
// own (as the creates' batch.EachAlone). The batch runs on a context of its own, until the
// latest of its callers' deadlines; a vote cast alone runs within its own.
func (s *Service) voteBatch(calls []*batch.Call[voteCall, decided]) {
	ctx, cancel := context.WithDeadline(context.Background(), batch.Deadline(calls, time.Now().Add(voteBatchTimeout)))
	defer cancel()
	var shared, alone []*batch.Call[voteCall, decided]
	seen := make(map[string]bool, len(calls))
	for _, c := range calls {
		if seen[c.Req.d.ApprovalID] {
			alone = append(alone, c)
			continue
		}
		seen[c.Req.d.ApprovalID] = true
		shared = append(shared, c)
	}
	if len(shared) > 1 {
		if err := s.voteTogether(ctx, shared); err != nil {
			var again []*batch.Call[voteCall, decided]
			for _, c := range shared {
				if c.Req.check != nil && c.Req.check.Refused() {
					c.Err = c.Req.check.Refuse()
					continue
				}
				again = append(again, c)
			}
			alone = append(again, alone...)
		}
	} else {
		alone = append(shared, alone...)
	}
	for _, c := range alone {
		c.Res, c.Err = s.voteCallAlone(ctx, c)
	}
}

// voteCallAlone casts c alone within its deadline, checking its token again even if a
// shared transaction that failed had passed it.
func (s *Service) voteCallAlone(ctx context.Context, c *batch.Call[voteCall, decided]) (decided, error) {
	if !c.Deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, c.Deadline)
		defer cancel()
	}
	if err := ctx.Err(); err != nil {
		return decided{}, err
	}
	if c.Req.check != nil {
		c.Req.check.again()
		ctx = withTokenChecks(ctx, []*TokenCheck{c.Req.check})
	}
	return s.voteAlone(ctx, c.Req.d)
}

// voteTogether casts votes on distinct approvals in one transaction: every request's token
// check, then one statement that locks all the approvals, in the order of their ids, and
// reads them; decide then runs over each vote in turn, as it would alone, and the writes of
// them all go with one commit. It sets each call's result only once that commit succeeded.
func (s *Service) voteTogether(ctx context.Context, calls []*batch.Call[voteCall, decided]) error {
	var checks []*TokenCheck
	ids := make([]string, len(calls))
	for i, c := range calls {
		ids[i] = c.Req.d.ApprovalID
		if c.Req.check != nil {
			checks = append(checks, c.Req.check)
		}
	}
	tx, err := s.Store.Begin(withTokenChecks(ctx, checks))
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	found, err := tx.ApprovalGetForUpdateMany(ctx, ids)
	if err != nil {
		return err
	}
	locked := &lockedTx{Tx: tx, approvals: make(map[string]*Approval, len(ids))}
	for _, id := range ids {
		locked.approvals[id] = nil
	}
	for _, a := range found {
		locked.approvals[a.ID] = a
	}
	results := make([]decided, len(calls))
	for i, c := range calls {
		if results[i], err = s.decide(ctx, locked, c.Req.d); err != nil {
			return err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	for i, c := range calls {
		c.Res = results[i]
	}
	return nil
}

// lockedTx is a transaction holding the locks of approvals it has read already
// (ApprovalGetForUpdateMany): ApprovalGetForUpdate answers one of them, or ENOTFOUND for an id
// that had none, from what was read, each at most once, so that decide runs over each vote of
// a batch as it would alone, with no round trip of its own.
type lockedTx struct {
	Tx
	approvals map[string]*Approval // by id; nil: none was found
}

func (t *lockedTx) ApprovalGetForUpdate(ctx context.Context, id string) (*Approval, error) {
	a, ok := t.approvals[id]
	if !ok {
		return t.Tx.ApprovalGetForUpdate(ctx, id)
	}
	delete(t.approvals, id) // a second vote on it would need the first one's effect
	if a == nil {
		return nil, Errorf(ENOTFOUND, "approval %s not found", id)
	}
	return a, nil
}
