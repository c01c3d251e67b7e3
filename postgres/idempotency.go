package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/batch"
	"github.com/approvald/approval/internal/sqldb"
)

// insertApprovalAttempts bounds how often InsertApproval looks again for the holder of a
// key whose holder it could not read: a key taken by a concurrent insert is read after that
// insert committed, so the second look finds it.
const insertApprovalAttempts = 3

// insert is one create handed to the batcher: the approval, its event's cause, its
// notifications and the request's pending token check, if any; policy is the approval's
// Resolved as JSON, "" for none.
type insert struct {
	a      *approval.Approval
	cause  []byte
	policy string
	outbox []*approval.OutboxMessage
	check  *approval.TokenCheck
}

// inserted is a create's outcome in its batch: refused (its token no longer good), written,
// or its key's holder (nil when the holder could not be read: look again).
type inserted struct {
	refused, written bool
	holder           *approval.KeyHolder
}

// insertApprovalsSQL writes a batch of creates in ONE statement, atomic without an explicit
// transaction: for each create whose token check passes (allowed), the approval, its
// approvers, whom it asks (approval.Ask), its approval.created event and the approvers'
// notifications in the outbox, unless an approval already holds its key (ON CONFLICT DO
// NOTHING, the approvals in key order: docs/architecture.md, "A create, step by step", and
// "Creates, intakes and reads in batches"). The creates arrive as parallel arrays ($1 to $15,
// $26 and $27, one element per create; $16 to $18 the approvers, $19 to $25 the
// notifications and $28 to $30 the asks, each naming its approval). It returns, per create in
// order, whether its token was good and whether its approval was written.
var insertApprovalsSQL = `
WITH req AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
		$7::bytea[], $8::integer[], $9::timestamptz[], $10::timestamptz[], $11::text[], $12::jsonb[],
		$13::bytea[], $14::text[], $15::timestamptz[], $26::text[], $27::timestamptz[])
		WITH ORDINALITY AS r(requester, operation_key, fingerprint, id, action, title, context,
			required_approvals, expires_at, created_at, callback_url, cause,
			token_hash, token_id, token_at, policy, remind_at, ord)
), allowed AS (
	SELECT r.* FROM req AS r WHERE ` + batchTokenGoodSQL + `
), app AS (
	INSERT INTO approvals (id, requester, operation_key, fingerprint, action, title, context,
		required_approvals, status, decided_at, expires_at, created_at, version, callback_url, policy,
		remind_at)
	SELECT id, requester, operation_key, fingerprint, action, title, context,
		required_approvals, 'pending', NULL, expires_at, created_at, 1, NULLIF(callback_url, ''),
		NULLIF(policy, '')::jsonb, remind_at
	FROM allowed
	ORDER BY operation_key, requester
	ON CONFLICT (operation_key, requester) DO NOTHING
	RETURNING id, requester, created_at
), approvers AS (
	INSERT INTO approval_approvers (approval_id, position, approver, created_at)
	SELECT app.id, p.position, p.approver, app.created_at
	FROM unnest($16::text[], $17::integer[], $18::text[]) AS p(approval_id, position, approver)
	JOIN app ON app.id = p.approval_id
), asked AS (
	INSERT INTO approval_asks (approval_id, kind, name, created_at)
	SELECT app.id, k.kind, k.name, app.created_at
	FROM unnest($28::text[], $29::text[], $30::text[]) AS k(approval_id, kind, name)
	JOIN app ON app.id = k.approval_id
), created AS (
	INSERT INTO events (approval_id, seq, type, at, actor, cause, detail)
	SELECT app.id, 1, '` + approval.EventCreated + `', app.created_at, app.requester, req.cause, NULL
	FROM app JOIN req ON req.id = app.id
), outbox AS (
	INSERT INTO outbox (id, natural_key, kind, approval_id, recipient, channel, event, payload,
		status, next_attempt_at, created_at, updated_at)
	SELECT m.id, m.natural_key, 'notification', app.id, m.recipient, m.channel, m.event, m.payload,
		'pending', app.created_at, app.created_at, app.created_at
	FROM unnest($19::text[], $20::text[], $21::text[], $22::text[], $23::text[], $24::text[], $25::text[])
		AS m(approval_id, id, natural_key, recipient, channel, event, payload)
	JOIN app ON app.id = m.approval_id
	ON CONFLICT (natural_key) DO NOTHING
)
SELECT req.id IN (SELECT id FROM allowed), req.id IN (SELECT id FROM app)
FROM req ORDER BY req.ord`

// heldApprovalsSQL reads, after insertApprovalsSQL in the same round trip (a statement of its
// own, so it sees what that one wrote and what concurrent creates of the same keys committed
// meanwhile), the approval holding each create's key other than the create's own: nothing
// for a create that wrote its key's approval. $1 to $3 are the creates' requesters, keys and
// ids; the first column is the create's position (from 1).
var heldApprovalsSQL = approvalDetailFrom(`unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS r(requester, operation_key, id, ord)
	JOIN approvals a ON a.operation_key = r.operation_key AND a.requester = r.requester AND a.id <> r.id`)

// InsertApproval writes a new approval in one statement, or returns the approval that holds
// its key (see approval.Store). It goes through the store's batcher: the creates arriving at
// the same moment share that statement and its round trip (the read of the holders rides in
// the same batch), and each create's rows are all written or none.
func (s *Store) InsertApproval(ctx context.Context, a *approval.Approval, cause approval.Cause, outbox []*approval.OutboxMessage) (*approval.KeyHolder, error) {
	causeJSON, _, err := sqldb.EventJSON(cause, nil)
	if err != nil {
		return nil, err
	}
	policy, err := sqldb.PolicyJSON(a)
	if err != nil {
		return nil, err
	}
	for _, m := range outbox {
		if m.Kind != approval.OutboxNotification {
			return nil, approval.Errorf(approval.EINTERNAL, "a create queues notifications only, not %s", m.Kind)
		}
	}
	in := insert{a: a, cause: causeJSON, policy: string(policy), outbox: outbox, check: approval.PendingTokenCheck(ctx)}
	for range insertApprovalAttempts {
		out, err := s.creates.Do(ctx, in)
		switch {
		case err != nil:
			return nil, translate("insert approval", err)
		case out.refused:
			return nil, in.check.Refuse()
		case in.check != nil:
			in.check.Pass()
		}
		in.check = nil // checked: a second look need not check again
		if out.written || out.holder != nil {
			return out.holder, nil
		}
	}
	return nil, &approval.Error{
		Code:       approval.ECONFLICT,
		Message:    "the operation is changing hands, try again",
		RetryAfter: time.Second,
	}
}

// insertBatch runs insertApprovalsSQL and heldApprovalsSQL over calls in one round trip, then
// signals the outbox worker when the batch queued a notification, and sets each call's
// result, or returns the error that failed them all.
func (s *Store) insertBatch(ctx context.Context, calls []*batch.Call[insert, inserted]) error {
	n := len(calls)
	var (
		requesters, keys, fingerprints, ids, actions, titles         = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		contexts, causes, hashes                                     = make([][]byte, n), make([]string, n), make([][]byte, n)
		required                                                     = make([]int, n)
		expires, created, checkedAt                                  = make([]time.Time, n), make([]time.Time, n), make([]time.Time, n)
		callbacks, tokenIDs, policies                                = make([]string, n), make([]string, n), make([]string, n)
		reminds                                                      = make([]*time.Time, n)
		pApproval, pApprover                                         []string
		pPosition                                                    []int
		mApproval, mID, mKey, mRecipient, mChannel, mEvent, mPayload []string
		kApproval, kKind, kName                                      []string
	)
	notifies := false
	for i, c := range calls {
		a := c.Req.a
		requesters[i], keys[i], fingerprints[i], ids[i], actions[i], titles[i] = a.Requester, a.OperationKey, a.Fingerprint, a.ID, a.Action, a.Title
		contexts[i], causes[i], required[i] = []byte(a.Context), string(c.Req.cause), a.RequiredApprovals
		expires[i], created[i], callbacks[i] = a.ExpiresAt, a.CreatedAt, a.CallbackURL
		hashes[i], tokenIDs[i], checkedAt[i] = tokenArgs(c.Req.check)
		policies[i], reminds[i] = c.Req.policy, a.FirstReminder()
		for j, approver := range a.Approvers {
			pApproval, pPosition, pApprover = append(pApproval, a.ID), append(pPosition, j+1), append(pApprover, approver)
		}
		for _, k := range a.Asks() {
			kind, name := "person", k.Person
			if k.Group != "" {
				kind, name = "group", k.Group
			}
			kApproval, kKind, kName = append(kApproval, a.ID), append(kKind, kind), append(kName, name)
		}
		for _, m := range c.Req.outbox {
			mApproval, mID, mKey, mRecipient = append(mApproval, a.ID), append(mID, m.ID), append(mKey, m.NaturalKey), append(mRecipient, m.Recipient)
			mChannel, mEvent, mPayload = append(mChannel, m.Channel), append(mEvent, m.Event), append(mPayload, string(m.Payload))
		}
	}

	conn, _, err := s.acquire(ctx, s.batchPool)
	if err != nil {
		return err
	}
	defer conn.Release()
	b := &pgx.Batch{}
	b.Queue(insertApprovalsSQL, requesters, keys, fingerprints, ids, actions, titles,
		contexts, required, expires, created, callbacks, causes, hashes, tokenIDs, checkedAt,
		pApproval, pPosition, pApprover, mApproval, mID, mKey, mRecipient, mChannel, mEvent, mPayload, policies, reminds,
		kApproval, kKind, kName)
	b.Queue(heldApprovalsSQL, requesters, keys, ids)
	results := make([]inserted, n)
	err = func() error {
		br := conn.SendBatch(ctx, b)
		defer br.Close()
		rows, err := br.Query()
		i := 0
		if err := sqldb.Each(rows, err, func(r sqldb.Row) error {
			var allowed, written bool
			if err := r.Scan(&allowed, &written); err != nil {
				return err
			}
			if i < n {
				results[i] = inserted{refused: !allowed, written: written}
				notifies = notifies || (written && len(calls[i].Req.outbox) > 0)
			}
			i++
			return nil
		}); err != nil {
			return err
		}
		if i != n {
			return fmt.Errorf("%d results for %d creates", i, n)
		}
		rows, err = br.Query()
		if err := eachByOrd(rows, err, n, func(i int, a *approval.Approval) {
			if !results[i].refused && !results[i].written {
				results[i].holder = &approval.KeyHolder{Fingerprint: a.Fingerprint, Approval: a}
			}
		}); err != nil {
			return err
		}
		return br.Close() // the commit
	}()
	if err != nil {
		return translate("insert approvals", err)
	}
	for i, c := range calls {
		c.Res = results[i]
	}
	if notifies {
		// The outbox worker's wake-up, after the commit and outside it (see signalSQL): one
		// more round trip, only for a batch that notifies someone.
		if _, err := conn.Exec(ctx, signalSQL, []string{approval.TopicOutbox}); err != nil {
			s.logger().Warn("postgres: outbox signal failed", "err", err)
		}
	}
	return nil
}
