package approval

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// The execution ledger's rules (docs/invariants.md, invariants 4 and 5): what a claim, an
// attempt's outcome, a release, an operator's action and a report do to an execution. Each is
// one store transaction. Apart from the claim, each reads and locks the execution (its
// approval's row first, the lock order of every execution change), decides in Go from what
// it read, and writes the new record with a statement guarded by what was read, its event and
// its signal. None needs an answer from its writes, so a store may send them together with
// the commit: on PostgreSQL each costs two round trips, and so does a claim (its one statement
// claims and reads the approvals; the marks and events go with the commit).

// ClaimExecutions claims up to limit executions for a runner (EINVALID unless lease and limit
// are positive): running ones whose lease has expired first, the longest expired first, so
// that a crashed runner's work is taken over within about a lease however many executions
// are due; then queued ones that are due, oldest due first. A running execution without a
// lease is an accepted async call waiting for its report and is never claimed. An expired
// claim whose call had been started (see RecordAttempts) may have reached the target: it is
// Recovered, and the execution becomes Uncertain. One with no start on record is Abandoned:
// the new attempt is an ordinary one. The runner records the start of every call to a target
// that does not honour the Idempotency-Key, so for those an abandoned attempt sent nothing;
// a target that honours the key is called without that record, since a second call under
// the same key is safe whether or not the first arrived. Each becomes running,
// attempts+1, leased until now+lease, with an EventExecutionAttempt whose cause is {kind:
// worker, attempt}, and comes with its approval, the body of the call. The new attempt
// number is the claim's fencing token, and the attempt is on record before any call is made.
// Runners on every replica may claim at once: each execution's attempt goes to exactly one of
// them, and none waits for another.
func (s *Service) ClaimExecutions(ctx context.Context, lease time.Duration, limit int) ([]*ExecutionClaim, error) {
	return claimDue(ctx, s, lease, limit, func(tx Tx, leaseEnd time.Time) ([]*ExecutionClaim, error) {
		return claimExecutions(ctx, tx, limit, leaseEnd)
	})
}

// claimExecutions is the rule of ClaimExecutions in the transaction tx.
func claimExecutions(ctx context.Context, tx Tx, limit int, leaseEnd time.Time) ([]*ExecutionClaim, error) {
	claims, err := tx.ExecutionClaimDue(ctx, limit, leaseEnd)
	if err != nil {
		return nil, err
	}
	trail := make([]Event, 0, len(claims))
	for _, c := range claims {
		// A recovered claim's predecessor may have sent its call: from now on the
		// outcome is uncertain, until an operator settles it.
		if c.Recovered && !c.Record.Uncertain {
			c.Record.Uncertain = true
			if err := tx.ExecutionUpdateIfAttempt(ctx, c.Record, c.Attempt); err != nil {
				return nil, err
			}
		}
		detail := map[string]any{"execution_id": c.Record.ID, "recovered": c.Recovered}
		if c.Abandoned {
			detail["abandoned"] = true
		}
		trail = append(trail, Event{ApprovalID: c.Record.ApprovalID, Type: EventExecutionAttempt, Actor: ActorSystem,
			Cause: Cause{Kind: CauseWorker, Attempt: c.Attempt}, Detail: detail})
	}
	return claims, tx.EventInsertMany(ctx, trail)
}

// RenewExecution extends a running claim's lease to now+lease (EINVALID unless lease is
// positive), only while attempt is the execution's current attempt, it is running and its
// lease is set; ECONFLICT if the claim was lost (a newer attempt, a report or an operator
// owns the execution, or an accepted async call cleared the lease). One guarded statement:
// the runner's keeper renews often, so it takes no lock first.
func (s *Service) RenewExecution(ctx context.Context, id string, attempt int, lease time.Duration) error {
	if lease <= 0 {
		return Errorf(EINVALID, "lease must be positive")
	}
	tx, err := s.Store.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)

	renewed, err := tx.ExecutionSetLeaseIfAttempt(ctx, id, attempt, tx.Now().Add(lease))
	if err != nil {
		return err
	}
	if !renewed {
		return lostClaim(id, attempt)
	}
	return tx.Commit(ctx)
}

// FinishAttempt records an attempt's outcome only if attempt is still the execution's
// current attempt and it is running under its lease (ECONFLICT otherwise: a newer attempt
// owns it, a report or an operator settled it, or the attempt already recorded an accepted
// async call; ENOTFOUND for an unknown execution). The lease is
// cleared in every case: a retry (status queued, due at o.RetryAt) waits for its time, and
// status running records an asynchronous call the target accepted, which waits, never
// claimed again, for ReportExecution. A nil o.Result keeps the result stored. o.Uncertain
// sets Uncertain; nothing here clears it. The event (succeeded, failed, needs_review,
// retry_scheduled or accepted) names the worker's attempt and says why; a retry signals
// TopicExecutions. It is FinishAttempts with one attempt.
func (s *Service) FinishAttempt(ctx context.Context, id string, attempt int, o AttemptOutcome) (*ExecutionRecord, error) {
	done, err := s.FinishAttempts(ctx, []AttemptFinish{{ID: id, Attempt: attempt, Outcome: o}})
	if err != nil {
		return nil, err
	}
	return done[0].Record, done[0].Err
}

// AttemptFinish is one attempt's outcome, for FinishAttempts.
type AttemptFinish struct {
	ID      string // the execution
	Attempt int    // the attempt's number: its fence
	Outcome AttemptOutcome
}

// AttemptFinished is what FinishAttempts did with one AttemptFinish: the execution as
// recorded, or why nothing was recorded for it (EINVALID for an outcome no attempt can have,
// ENOTFOUND for an unknown execution, ECONFLICT when the attempt no longer holds it).
type AttemptFinished struct {
	Record *ExecutionRecord
	Err    error
}

// FinishAttempts records several attempts' outcomes, each under the rules of FinishAttempt,
// in one transaction: one commit for all of them, and on PostgreSQL one statement each to
// lock and read them, write them and append their events, whatever their number. Each is
// still fenced by its own attempt: an attempt that lost its claim is refused (ECONFLICT in
// its AttemptFinished) and the others are recorded, each with its own event. The answers
// come in the order of fs. An error is the transaction's: then nothing was recorded, and
// every attempt still holds (or lost) its claim as before, so a runner that cannot record
// leaves its claims to run out and be recovered as uncertain, exactly as after a crash.
// Several finishes of one execution in fs are EINVALID, all but the first.
func (s *Service) FinishAttempts(ctx context.Context, fs []AttemptFinish) ([]AttemptFinished, error) {
	done, err := s.record(ctx, AttemptBatch{Finishes: fs})
	return done.Finished, err
}

// FinishAndClaim records the outcomes fs under the rules of FinishAttempts and then, in the
// same transaction, claims up to limit executions under the rules of ClaimExecutions
// (EINVALID unless lease and limit are positive): a runner whose attempts ended has their
// slots to fill, and one commit serves both. An execution whose outcome is a retry already
// due may be among the claims. The answers come as from each alone; an error is the
// transaction's: then nothing was recorded and nothing claimed. While s.Clock says this
// process's clock is off the database's, the outcomes are recorded and nothing is claimed.
func (s *Service) FinishAndClaim(ctx context.Context, fs []AttemptFinish, lease time.Duration, limit int) ([]AttemptFinished, []*ExecutionClaim, error) {
	if lease <= 0 || limit <= 0 {
		return nil, nil, Errorf(EINVALID, "lease and limit must be positive")
	}
	done, err := s.RecordAttempts(ctx, AttemptBatch{Finishes: fs, Lease: lease, Claim: limit})
	return done.Finished, done.Claims, err
}

// AttemptSend is an attempt whose call is about to be sent, for RecordAttempts.
type AttemptSend struct {
	ID      string // the execution
	Attempt int    // the attempt's number: its fence
}

// AttemptBatch is what a runner writes in one transaction (RecordAttempts): calls about to
// be sent, outcomes of attempts that ended, and a claim for the slots they free.
type AttemptBatch struct {
	Sends    []AttemptSend
	Finishes []AttemptFinish
	// Lease is how long the sends' claims and the new claims hold their executions from now;
	// it must be positive when there are sends or a claim.
	Lease time.Duration
	// Claim is how many executions to claim, at most; 0 claims none.
	Claim int
}

// AttemptsRecorded is what RecordAttempts did with an AttemptBatch: Sent[i] is nil when the
// call of Sends[i] may now be sent, or why it must not (ECONFLICT: the attempt no longer
// holds its execution; EINVALID: the execution is sent twice in one batch); Finished[i] is
// the answer to Finishes[i], as from FinishAttempts; Claims are the executions claimed.
type AttemptsRecorded struct {
	Sent     []error
	Finished []AttemptFinished
	Claims   []*ExecutionClaim
}

// RecordAttempts writes a runner's batch b in one transaction: the outcomes under the rules of
// FinishAttempts, then the sends, then the claim under the rules of ClaimExecutions. A send
// marks that the attempt's call is about to start, the durable step between its claim and
// its call: only an attempt whose send is committed may call the target, so a claim whose
// lease expires unmarked provably sent nothing and is taken over as an ordinary attempt
// (Abandoned), and only one whose lease expires marked is uncertain (Recovered). A send also
// renews the attempt's lease to now+b.Lease, which proves, as RenewExecution does, that no
// newer attempt owns the execution when the call starts; it is refused (ECONFLICT in its
// answer) when the attempt no longer holds it, like a renewal, and writes no event: the claim's
// EventExecutionAttempt names the attempt already. EINVALID for a batch with sends or a claim
// and no positive lease, or a negative claim. An error is the transaction's: then nothing was
// recorded, marked or claimed. While s.Clock says this process's clock is off the
// database's, nothing is claimed and the rest is written.
func (s *Service) RecordAttempts(ctx context.Context, b AttemptBatch) (AttemptsRecorded, error) {
	if b.Claim < 0 || ((len(b.Sends) > 0 || b.Claim > 0) && b.Lease <= 0) {
		return AttemptsRecorded{}, Errorf(EINVALID, "lease must be positive to send or claim, and a claim not negative")
	}
	if b.Claim > 0 && s.Clock.Check() != nil {
		b.Claim = 0 // the rest is written; no work is claimed while the clock is off
	}
	return s.record(ctx, b)
}

// record is RecordAttempts once b is checked.
func (s *Service) record(ctx context.Context, b AttemptBatch) (AttemptsRecorded, error) {
	fs := b.Finishes
	done := AttemptsRecorded{Finished: make([]AttemptFinished, len(fs)), Sent: make([]error, len(b.Sends))}
	events := make([]string, len(fs))
	ids := make([]string, 0, len(fs))
	seen := make(map[string]bool, len(fs))
	for i, f := range fs {
		events[i], done.Finished[i].Err = attemptEvent(f.Outcome)
		if done.Finished[i].Err == nil && seen[f.ID] {
			done.Finished[i].Err = Errorf(EINVALID, "execution %s is finished twice in one batch", f.ID)
		}
		if done.Finished[i].Err == nil {
			seen[f.ID] = true
			ids = append(ids, f.ID)
		}
	}
	sendIDs, sendAttempts := make([]string, 0, len(b.Sends)), make([]int, 0, len(b.Sends))
	sent := make(map[string]bool, len(b.Sends))
	for i, x := range b.Sends {
		if sent[x.ID] {
			done.Sent[i] = Errorf(EINVALID, "execution %s is sent twice in one batch", x.ID)
			continue
		}
		sent[x.ID] = true
		sendIDs, sendAttempts = append(sendIDs, x.ID), append(sendAttempts, x.Attempt)
	}
	if len(ids) == 0 && len(sendIDs) == 0 && b.Claim == 0 {
		return done, nil
	}
	tx, err := s.Store.Begin(ctx)
	if err != nil {
		return AttemptsRecorded{}, err
	}
	defer tx.Rollback(ctx)

	// The outcomes first: they lock approvals, then executions, in the lock order of every
	// execution change. The sends lock only the executions they mark and come after, and
	// the claim waits for no lock, so this transaction never holds a row while waiting
	// for another.
	recorded := 0
	if len(ids) > 0 {
		if recorded, err = s.finish(ctx, tx, fs, ids, events, done.Finished); err != nil {
			return AttemptsRecorded{}, err
		}
	}
	if len(sendIDs) > 0 {
		marked, err := tx.ExecutionSetSendingIfAttemptMany(ctx, sendIDs, sendAttempts, tx.Now().Add(b.Lease))
		if err != nil {
			return AttemptsRecorded{}, err
		}
		ok := make(map[string]bool, len(marked))
		for _, id := range marked {
			ok[id] = true
		}
		for i, x := range b.Sends {
			if done.Sent[i] == nil && !ok[x.ID] {
				done.Sent[i] = lostClaim(x.ID, x.Attempt)
			}
		}
		recorded += len(marked)
	}
	if b.Claim > 0 {
		if done.Claims, err = claimExecutions(ctx, tx, b.Claim, tx.Now().Add(b.Lease)); err != nil {
			return AttemptsRecorded{}, err
		}
	}
	if recorded == 0 && len(done.Claims) == 0 {
		return done, nil // nothing written: the rollback ends the transaction
	}
	if err := tx.Commit(ctx); err != nil {
		return AttemptsRecorded{}, err
	}
	return done, nil
}

// finish writes, in tx, the outcomes of fs whose ids are valid (the others have their
// answer in done already; events[i] is fs[i]'s event), and fills in their answers. It
// returns how many it wrote.
func (s *Service) finish(ctx context.Context, tx Tx, fs []AttemptFinish, ids, events []string, done []AttemptFinished) (int, error) {
	locked, err := tx.ExecutionGetForUpdateMany(ctx, ids)
	if err != nil {
		return 0, err
	}
	byID := make(map[string]*ExecutionRecord, len(locked))
	for _, rec := range locked {
		byID[rec.ID] = rec
	}
	now := tx.Now()
	var (
		recs     []*ExecutionRecord
		attempts []int
		trail    []Event
		requeued bool
	)
	for i, f := range fs {
		if done[i].Err != nil {
			continue
		}
		rec := byID[f.ID]
		if rec == nil {
			done[i].Err = Errorf(ENOTFOUND, "execution %s not found", f.ID)
			continue
		}
		// The fence: a runner whose lease expired and whose execution was claimed again
		// (attempts+1), or settled by a report or an operator, writes nothing.
		if err := attemptHolds(rec, f.Attempt); err != nil {
			done[i].Err = err
			continue
		}
		o := f.Outcome
		detail := map[string]any{"reason": o.Reason, "error": o.Error}
		rec.Status, rec.LastError, rec.NextAttemptAt, rec.LeaseExpiresAt, rec.UpdatedAt = o.Status, o.Error, nil, nil, now
		if o.Result != nil {
			rec.Result = o.Result
		}
		rec.Uncertain = rec.Uncertain || o.Uncertain // once recorded, it stays
		if o.Status == ExecutionQueued {
			at := o.RetryAt.UTC().Truncate(Precision)
			rec.NextAttemptAt = &at
			detail["retry_at"] = at
			requeued = true
		}
		recs, attempts = append(recs, rec), append(attempts, f.Attempt)
		trail = append(trail, Event{ApprovalID: rec.ApprovalID, Type: events[i], Actor: ActorSystem,
			Cause: Cause{Kind: CauseWorker, Attempt: f.Attempt}, Detail: detail})
		done[i].Record = rec
	}
	if len(recs) == 0 {
		return 0, nil
	}
	if err := tx.ExecutionUpdateIfAttemptMany(ctx, recs, attempts); err != nil {
		return 0, err
	}
	for _, rec := range recs {
		if rec.Status == ExecutionNeedsReview {
			if err := s.queueReview(ctx, tx, rec); err != nil {
				return 0, err
			}
		}
	}
	if err := tx.EventInsertMany(ctx, trail); err != nil {
		return 0, err
	}
	if requeued {
		if err := tx.Notify(ctx, TopicExecutions); err != nil {
			return 0, err
		}
	}
	return len(recs), nil
}

// attemptEvent is the event that records an attempt ending in o, or EINVALID for an outcome
// no attempt can have.
func attemptEvent(o AttemptOutcome) (string, error) {
	switch o.Status {
	case ExecutionSucceeded:
		return EventExecutionSucceeded, nil
	case ExecutionFailed:
		return EventExecutionFailed, nil
	case ExecutionNeedsReview:
		return EventExecutionNeedsReview, nil
	case ExecutionQueued:
		if o.RetryAt == nil {
			return "", Errorf(EINVALID, "a retry needs a time to retry at")
		}
		return EventExecutionRetry, nil
	case ExecutionRunning:
		return EventExecutionAccepted, nil
	}
	return "", Errorf(EINVALID, "an attempt cannot end in status %q", o.Status)
}

// ReleaseExecution gives a claim back on graceful shutdown before its call was sent: queued,
// due now, the attempt not counted (attempts-1; the next claim takes the same number again,
// which is safe because this attempt wrote nothing else), with an EventExecutionReleased and
// a TopicExecutions signal. Only a running attempt that still holds its lease can be
// released (ECONFLICT otherwise): a running execution without a lease is an accepted async
// call, sent already, and putting it back in the queue would send it again.
func (s *Service) ReleaseExecution(ctx context.Context, id string, attempt int) error {
	tx, err := s.Store.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)

	rec, err := tx.ExecutionGetForUpdate(ctx, id)
	if err != nil {
		return err
	}
	if err := attemptHolds(rec, attempt); err != nil {
		return err
	}
	now := tx.Now()
	rec.Status, rec.Attempts, rec.NextAttemptAt, rec.LeaseExpiresAt, rec.UpdatedAt = ExecutionQueued, attempt-1, &now, nil, now
	if err := tx.ExecutionUpdateIfAttempt(ctx, rec, attempt); err != nil {
		return err
	}
	cause := Cause{Kind: CauseWorker, Attempt: attempt}
	if err := tx.EventInsert(ctx, rec.ApprovalID, EventExecutionReleased, ActorSystem, cause, map[string]any{"execution_id": id}); err != nil {
		return err
	}
	if err := tx.Notify(ctx, TopicExecutions); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// RetryExecution re-queues a failed, needs_review or cancelled execution, or one
// AwaitingReport (an accepted async call whose report may never come), due now, under the
// same operation key and without a new approval, as a new run: AttemptBase becomes Attempts
// and Uncertain is cleared, the operator having settled what earlier attempts did. Attempts
// keep counting, so every attempt number stays a unique fence. ECONFLICT otherwise, a
// running execution an attempt holds included; ENOTFOUND for an unknown one. The
// EventExecutionRetried names the operator and the status the execution left; the retry
// signals TopicExecutions. p is the operator: EFORBIDDEN, before anything else, unless p
// may operate (Principal.MayOperate).
func (s *Service) RetryExecution(ctx context.Context, p Principal, id string, cause Cause) (*ExecutionRecord, error) {
	return s.operate(ctx, p, id, cause, func(rec *ExecutionRecord, now time.Time) (string, map[string]any, error) {
		switch {
		case rec.Status == ExecutionFailed, rec.Status == ExecutionNeedsReview,
			rec.Status == ExecutionCancelled, rec.AwaitingReport():
		default:
			return "", nil, Errorf(ECONFLICT, "execution %s is %s; only a failed, needs_review or cancelled execution, or an accepted one awaiting its report, can be retried", id, rec.Status)
		}
		detail := map[string]any{"execution_id": id, "previous_status": rec.Status}
		rec.Status, rec.NextAttemptAt, rec.LeaseExpiresAt = ExecutionQueued, &now, nil
		rec.Uncertain, rec.AttemptBase = false, rec.Attempts
		return EventExecutionRetried, detail, nil
	})
}

// ResolveExecution records what really happened (status succeeded or failed, EINVALID
// otherwise) to an execution in needs_review or failed, or to one AwaitingReport (the
// operator learnt the outcome the target never reported), with the operator's note in the
// EventExecutionResolved, and clears Uncertain: nothing about it is uncertain any more.
// ECONFLICT otherwise; ENOTFOUND for an unknown execution. A report arriving afterwards finds
// a targeted execution that no longer takes reports (Reportable), unless one was applied
// before. p is the operator: EFORBIDDEN, before anything else, unless p may operate.
func (s *Service) ResolveExecution(ctx context.Context, p Principal, id string, status ExecutionStatus, note string, cause Cause) (*ExecutionRecord, error) {
	if err := mayOperate(p); err != nil {
		return nil, err
	}
	if status != ExecutionSucceeded && status != ExecutionFailed {
		return nil, Errorf(EINVALID, "an execution is resolved as succeeded or failed, not %q", status)
	}
	if err := CheckNote(note); err != nil {
		return nil, err
	}
	return s.operate(ctx, p, id, cause, func(rec *ExecutionRecord, _ time.Time) (string, map[string]any, error) {
		if rec.Status != ExecutionNeedsReview && rec.Status != ExecutionFailed && !rec.AwaitingReport() {
			return "", nil, Errorf(ECONFLICT, "execution %s is %s; only a needs_review or failed execution, or an accepted one awaiting its report, can be resolved", id, rec.Status)
		}
		detail := map[string]any{"execution_id": id, "status": status, "previous_status": rec.Status, "note": note}
		rec.Status, rec.NextAttemptAt, rec.LeaseExpiresAt, rec.Uncertain = status, nil, nil, false
		return EventExecutionResolved, detail, nil
	})
}

// CancelExecution cancels a queued execution before the runner claims it, with an
// EventExecutionCancelled naming the operator. ECONFLICT in any other status; ENOTFOUND for
// an unknown execution. p is the operator: EFORBIDDEN, before anything else, unless p may
// operate.
func (s *Service) CancelExecution(ctx context.Context, p Principal, id string, cause Cause) (*ExecutionRecord, error) {
	return s.operate(ctx, p, id, cause, func(rec *ExecutionRecord, _ time.Time) (string, map[string]any, error) {
		if rec.Status != ExecutionQueued {
			return "", nil, Errorf(ECONFLICT, "execution %s is %s; only a queued execution can be cancelled", id, rec.Status)
		}
		rec.Status, rec.NextAttemptAt = ExecutionCancelled, nil
		return EventExecutionCancelled, map[string]any{"execution_id": id}, nil
	})
}

// operate runs an operator's action for p on the execution id in one transaction:
// EFORBIDDEN before anything is read unless p may operate (Principal.MayOperate). move
// decides from the execution as read under its lock and changes rec to what it becomes at
// now, or refuses, and then nothing is written. The new state is written guarded by the
// status it was read in, with move's event by p's subject for cause; an execution queued
// again signals TopicExecutions.
func (s *Service) operate(ctx context.Context, p Principal, id string, cause Cause, move func(rec *ExecutionRecord, now time.Time) (event string, detail map[string]any, err error)) (*ExecutionRecord, error) {
	if err := mayOperate(p); err != nil {
		return nil, err
	}
	actor := p.Subject
	tx, err := s.Store.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx)

	rec, err := tx.ExecutionGetForUpdate(ctx, id)
	if err != nil {
		return nil, err
	}
	was, now := rec.Status, tx.Now()
	event, detail, err := move(rec, now)
	if err != nil {
		return nil, err
	}
	rec.UpdatedAt = now
	if err := tx.ExecutionUpdateIfStatus(ctx, rec, was); err != nil {
		return nil, err
	}
	return commitExecution(ctx, tx, rec, event, actor, cause, detail)
}

// commitExecution ends a change of rec, already written: it appends the change's event to
// the approval's trail, wakes the runners when rec is queued again, and commits.
func commitExecution(ctx context.Context, tx Tx, rec *ExecutionRecord, event, actor string, cause Cause, detail map[string]any) (*ExecutionRecord, error) {
	if err := tx.EventInsert(ctx, rec.ApprovalID, event, actor, cause, detail); err != nil {
		return nil, err
	}
	if rec.Status == ExecutionQueued {
		if err := tx.Notify(ctx, TopicExecutions); err != nil {
			return nil, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, err
	}
	return rec, nil
}

// ReportExecution applies an asynchronous outcome if r.Version is newer than the applied
// version, and reports whether it did; a version at or below it is stale, recorded in the
// audit trail only (EventExecutionReportStale), and the execution is returned as it stays
// (invariant 4). The report names the execution by r.ApprovalID, or else by r.OperationKey,
// which must name exactly one (ECONFLICT when several requesters use it); ENOTFOUND when
// there is none; EINVALID for a status other than succeeded or failed, or a version below 1.
//
// Only a Reportable execution takes reports, even one a runner holds: the target's own
// word wins, and the runner's later FinishAttempt finds it no longer running. For any other
// (a targeted execution queued, succeeded, failed, in needs_review or cancelled before any
// report) it is ECONFLICT ("approvald records this execution's outcome from its own call to
// the target") and nothing changes, not even the audit trail; through the inbox that is a
// processed event whose outcome says "refused: ...". An applied report sets the status, the
// result and AppliedVersion, clears any lease or due time, and appends
// EventExecutionReported.
//
// p is the reporter, the actor of the events (r.Actor is ignored): ENOTFOUND, before
// anything else, when r.ApprovalID names an approval p may not read (Principal.MayRead: its
// existence is not revealed), and EFORBIDDEN when p may not report on it (Principal.MayReport).
// By operation key only principals whose role reads every approval report (EFORBIDDEN
// otherwise). For a report by approval id a refusal about the execution (none, or one
// approvald reports itself) is ECONFLICT carrying the approval as it is: the approval exists,
// so it is a conflict with its state, answered as a decision conflict is.
func (s *Service) ReportExecution(ctx context.Context, p Principal, r ExecutionReport) (applied bool, rec *ExecutionRecord, err error) {
	r.Actor = p.Subject
	if r.ApprovalID == "" {
		if !p.Role.ReadsAll() {
			return false, nil, Errorf(EFORBIDDEN, "role %s reports an execution by its approval's id, not by operation key", p.Role)
		}
		return s.reportExecution(ctx, r)
	}
	a, err := s.Approval(ctx, p, r.ApprovalID)
	if err != nil {
		return false, nil, err
	}
	if !p.MayReport(a) {
		return false, nil, Errorf(EFORBIDDEN, "only the requester (%s), an operator or an admin may report the execution of approval %s", a.Requester, a.ID)
	}
	applied, rec, err = s.reportExecution(ctx, r)
	if code := ErrorCode(err); code == ENOTFOUND || code == ECONFLICT {
		cur, rerr := s.Store.Approval(ctx, a.ID)
		switch {
		case rerr != nil:
		case cur.Status != StatusApproved:
			err = &Error{Code: ECONFLICT, Approval: cur,
				Message: fmt.Sprintf("approval %s is %s; only an approved approval has an execution to report on", a.ID, cur.Status)}
		case code == ECONFLICT:
			err = &Error{Code: ECONFLICT, Message: ErrorMessage(err), Approval: cur}
		}
	}
	return applied, rec, err
}

// reportExecution applies r in a transaction of its own (see report).
func (s *Service) reportExecution(ctx context.Context, r ExecutionReport) (applied bool, rec *ExecutionRecord, err error) {
	tx, err := s.Store.Begin(ctx)
	if err != nil {
		return false, nil, err
	}
	defer tx.Rollback(ctx)

	res, err := s.report(ctx, tx, r)
	if err != nil {
		return false, nil, err
	}
	if res.refusal != nil {
		return false, nil, res.refusal
	}
	if err := tx.Commit(ctx); err != nil {
		return false, nil, err
	}
	return res.applied, res.rec, nil
}

// reported is what report did. A refusal (invalid, no such execution, an ambiguous operation
// key, an execution whose outcome is approvald's own) is the answer to the reporter, not a
// failure of the transaction; nothing was written before it.
type reported struct {
	applied bool
	rec     *ExecutionRecord // the execution as it now is; nil with a refusal
	refusal *Error
}

// report applies r inside tx under the rules of ReportExecution: the one code path of an
// asynchronous outcome, whether it comes from the API (ReportExecution) or from an inbox
// event (ApplyInbox). An error means tx must be rolled back.
func (s *Service) report(ctx context.Context, tx Tx, r ExecutionReport) (reported, error) {
	refuse := func(e *Error) (reported, error) { return reported{refusal: e}, nil }
	if r.Status != ExecutionSucceeded && r.Status != ExecutionFailed {
		return refuse(Errorf(EINVALID, "a report's status is succeeded or failed, not %q", r.Status))
	}
	if r.Version <= 0 {
		return refuse(Errorf(EINVALID, "a report's version must be positive"))
	}
	// The input policy, before the store: a result PostgreSQL's jsonb could not hold (a NUL,
	// an unpaired surrogate) would fail there and be kept by SQLite.
	if err := CheckText("operation_key", r.OperationKey); err != nil {
		return refuse(AsError(err))
	}
	if len(r.Result) > 0 {
		if !json.Valid(r.Result) {
			return refuse(Errorf(EINVALID, "a report's result is not valid JSON"))
		}
		if err := CheckJSON("result", r.Result); err != nil {
			return refuse(AsError(err))
		}
	}

	var cur *ExecutionRecord
	switch {
	case r.ApprovalID != "":
		var err error
		cur, err = tx.ExecutionGetByApprovalForUpdate(ctx, r.ApprovalID)
		if ErrorCode(err) == ENOTFOUND {
			return refuse(Errorf(ENOTFOUND, "approval %s has no execution (it does not exist or is not approved)", r.ApprovalID))
		} else if err != nil {
			return reported{}, err
		}
	case r.OperationKey != "":
		// Operation keys are unique per requester only.
		ids, err := tx.ExecutionIDsByOperationKey(ctx, r.OperationKey, 2)
		switch {
		case err != nil:
			return reported{}, err
		case len(ids) == 0:
			return refuse(Errorf(ENOTFOUND, "no execution has operation key %q", r.OperationKey))
		case len(ids) > 1:
			return refuse(Errorf(ECONFLICT, "operation key %q is used by several requesters; name the approval id", r.OperationKey))
		}
		if cur, err = tx.ExecutionGetForUpdate(ctx, ids[0]); err != nil {
			return reported{}, err
		}
	default:
		return refuse(Errorf(EINVALID, "a report names an approval id or an operation key"))
	}

	if !cur.Reportable() {
		return refuse(Errorf(ECONFLICT, "execution %s is %s: approvald records this execution's outcome from its own call to the target", cur.ID, cur.Status))
	}
	if r.Version <= cur.AppliedVersion {
		// Invariant 4: an older outcome never overwrites a newer one; it is only recorded.
		detail := map[string]any{"execution_id": cur.ID, "status": r.Status, "version": r.Version, "applied_version": cur.AppliedVersion}
		if err := tx.EventInsert(ctx, cur.ApprovalID, EventExecutionReportStale, r.Actor, r.Cause, detail); err != nil {
			return reported{}, err
		}
		return reported{rec: cur}, nil
	}
	was := cur.Status
	rec := cur
	rec.Status, rec.Result, rec.AppliedVersion = r.Status, r.Result, r.Version
	rec.NextAttemptAt, rec.LeaseExpiresAt, rec.UpdatedAt = nil, nil, tx.Now()
	if err := tx.ExecutionUpdateIfStatus(ctx, rec, was); err != nil {
		return reported{}, err
	}
	detail := map[string]any{"execution_id": rec.ID, "status": r.Status, "version": r.Version, "previous_status": was}
	if err := tx.EventInsert(ctx, rec.ApprovalID, EventExecutionReported, r.Actor, r.Cause, detail); err != nil {
		return reported{}, err
	}
	return reported{applied: true, rec: rec}, nil
}

// attemptHolds is the fence of a runner's attempt on the execution rec, as read under its
// lock: nil while attempt is its current attempt and it is running under a lease, the lost
// claim's ECONFLICT otherwise. A running execution without a lease is an accepted async
// call: no attempt holds it any more, only a report or an operator ends it.
func attemptHolds(rec *ExecutionRecord, attempt int) error {
	return holds("execution", rec.ID, attempt, rec.Attempts, rec.Status == ExecutionRunning && rec.LeaseExpiresAt != nil)
}

// lostClaim is the answer to a runner whose attempt no longer holds the execution.
func lostClaim(id string, attempt int) error {
	return claimLost("execution", id, attempt)
}
