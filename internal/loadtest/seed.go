package loadtest

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/approvald/approval"
	newid "github.com/approvald/approval/internal/id"
)

// Seed describes the data approvald bench --seed puts in a fresh database before the
// scenarios, so that they run against a database the size of one that has served for months
// rather than an empty one. It is written through a bulk path (COPY on PostgreSQL, batched
// multi-row INSERTs on SQLite), never through the API, but row for row as the stores write
// it: the same ids, times at microsecond precision, the same JSON in events and responses.
//
// Approval i of N is created at Now - Span + i*Span/N, so ids and creation times rise with
// i and the newest are the last. Its fate depends on its age and on i:
//
//   - created in the last 12 hours: pending (it expires 24 hours after its creation);
//   - otherwise, by i%100: 0-74 approved, 75-86 rejected, 87-94 expired (only once its
//     expiry has passed; younger ones are approved instead), 95-99 cancelled;
//   - approved ones have their execution: for the even i (action deploy, no target)
//     not_configured, for the odd i (action seed-payout) a targeted call that succeeded at
//     its first attempt, with the events the runner would have appended;
//   - one approval in four created within InboxRetain has an inbox event: a processed
//     approval.decision naming it (even i) or an ignored event of an unknown type (odd i).
type Seed struct {
	N          int
	Now        time.Time
	Span       time.Duration // how far back the oldest approval was created; 0 means 90 days
	Requesters []string      // approval i is requested by Requesters[i%len]
	Approvers  []string      // approval i lists Approvers[i%len] and Approvers[(i+1)%len]
	// InboxRetain is retention.inbox_ids; 0 means 30 days.
	InboxRetain time.Duration
	Source      string // the inbox events' source; "" means "seed"
}

// Seeded actions: SeedAction has no target, SeedTargetedAction stands for one that had.
const (
	SeedAction         = "deploy"
	SeedTargetedAction = "seed-payout"
)

// seedBatch is how many approvals one batch (one transaction) writes.
const seedBatch = 5000

func (s *Seed) defaults() error {
	if s.N < 0 {
		return fmt.Errorf("seed: %d approvals", s.N)
	}
	if len(s.Requesters) == 0 || len(s.Approvers) < 2 {
		return fmt.Errorf("seed: needs a requester and two approvers")
	}
	if s.Now.IsZero() {
		s.Now = time.Now()
	}
	s.Now = s.Now.UTC().Truncate(approval.Precision)
	if s.Span <= 0 {
		s.Span = 90 * 24 * time.Hour
	}
	if s.InboxRetain <= 0 {
		s.InboxRetain = 30 * 24 * time.Hour
	}
	if s.Source == "" {
		s.Source = "seed"
	}
	return nil
}

// The rows of one batch, one struct per table, in the stores' Go types; each dialect's
// writer converts them to its columns.
type (
	seedApprovalRow struct {
		id, requester, key, fingerprint, action, title string
		context                                        []byte
		status                                         approval.Status
		decidedAt                                      *time.Time
		expiresAt, createdAt                           time.Time
		version                                        int64
	}
	seedApproverRow struct {
		approvalID string
		position   int
		approver   string
		createdAt  time.Time // the approval's, as the stores copy it
	}
	seedDecisionRow struct {
		approvalID, approver, verdict, comment string
		at                                     time.Time
		eventSeq                               int64
	}
	seedEventRow struct {
		approvalID    string
		seq           int64
		typ           string
		at            time.Time
		actor         string
		cause, detail []byte // detail nil when none
	}
	seedExecutionRow struct {
		id, approvalID, key, action string
		targeted                    bool
		status                      approval.ExecutionStatus
		attempts                    int
		result                      []byte
		createdAt, updatedAt        time.Time
	}
	seedInboxRow struct {
		id, source, eventID, typ string
		headers, body            []byte
		receivedAt, processedAt  time.Time
		status                   approval.InboxStatus
		outcome, approvalID      string
	}
)

// seedRows is one batch.
type seedRows struct {
	approvals  []seedApprovalRow
	approvers  []seedApproverRow
	asks       []seedApproverRow // of the pending approvals: a person each, no position
	decisions  []seedDecisionRow
	events     []seedEventRow
	executions []seedExecutionRow
	inbox      []seedInboxRow
}

// batch generates the rows of approvals from to to-1.
func (s *Seed) batch(from, to int) (*seedRows, error) {
	r := &seedRows{}
	for i := from; i < to; i++ {
		if err := s.add(r, i); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// add generates approval i and the rows that hang on it.
func (s *Seed) add(r *seedRows, i int) error {
	created := s.Now.Add(-s.Span + time.Duration(float64(s.Span)*float64(i)/float64(max(s.N, 1)))).Truncate(approval.Precision)
	expires := created.Add(approval.DefaultExpiresIn)
	age := s.Now.Sub(created)
	id := newid.New("apr", created)
	requester := s.Requesters[i%len(s.Requesters)]
	approvers := []string{s.Approvers[i%len(s.Approvers)], s.Approvers[(i+1)%len(s.Approvers)]}
	action := SeedAction
	if i%2 == 1 {
		action = SeedTargetedAction
	}
	key := "seed-" + strconv.Itoa(i)
	fp := sha256.Sum256([]byte(requester + "\n" + key))
	a := &approval.Approval{
		ID: id, OperationKey: key, Action: action, Title: "Deploy api v1." + strconv.Itoa(i) + " to prod",
		Context: seedContext(i), Requester: requester, Approvers: approvers, RequiredApprovals: 1,
		Status: approval.StatusPending, Decisions: []approval.Decision{}, ExpiresAt: expires,
		CreatedAt: created, Version: 1, Fingerprint: hex.EncodeToString(fp[:]),
	}

	httpCause := func(n int) []byte {
		return mustJSON(approval.HTTPCause("req_seed" + strconv.Itoa(i) + "x" + strconv.Itoa(n)))
	}
	events := []seedEventRow{{approvalID: id, seq: 1, typ: approval.EventCreated, at: created, actor: requester, cause: httpCause(1)}}
	switch k := i % 100; {
	case age < 12*time.Hour:
		// pending
	case k >= 95:
		at := created.Add(5 * time.Minute)
		a.Status, a.DecidedAt = approval.StatusCancelled, &at
		events = append(events, seedEventRow{approvalID: id, seq: 2, typ: approval.EventCancelled, at: at, actor: requester, cause: httpCause(2)})
	case k >= 87 && k < 95 && !expires.After(s.Now):
		at := expires
		a.Status, a.DecidedAt = approval.StatusExpired, &at
		events = append(events, seedEventRow{approvalID: id, seq: 2, typ: approval.EventExpired, at: at, actor: approval.ActorSystem, cause: mustJSON(approval.SweeperCause())})
	default:
		at := created.Add(time.Duration(60+i%3600) * time.Second)
		verdict, status, typ := approval.VerdictApprove, approval.StatusApproved, approval.EventApproved
		if k >= 75 && k < 87 {
			verdict, status, typ = approval.VerdictReject, approval.StatusRejected, approval.EventRejected
		}
		a.Status, a.DecidedAt = status, &at
		voter := approvers[0]
		comment := "seen"
		r.decisions = append(r.decisions, seedDecisionRow{approvalID: id, approver: voter, verdict: string(verdict), comment: comment, at: at, eventSeq: 2})
		events = append(events,
			seedEventRow{approvalID: id, seq: 2, typ: approval.EventVoted, at: at, actor: voter, cause: httpCause(2),
				detail: mustJSON(map[string]any{"verdict": verdict, "comment": comment})},
			seedEventRow{approvalID: id, seq: 3, typ: typ, at: at, actor: voter, cause: httpCause(2)})
		if status != approval.StatusApproved {
			break
		}
		x := seedExecutionRow{id: newid.New("exe", at), approvalID: id, key: key, action: action,
			status: approval.ExecutionNotConfigured, createdAt: at, updatedAt: at}
		if action == SeedTargetedAction {
			done := at.Add(150 * time.Millisecond)
			x.targeted, x.status, x.attempts, x.result, x.updatedAt = true, approval.ExecutionSucceeded, 1, []byte(`{"ok":true}`+"\n"), done
			worker := mustJSON(approval.Cause{Kind: approval.CauseWorker, Attempt: 1})
			events = append(events,
				seedEventRow{approvalID: id, seq: 4, typ: approval.EventExecutionQueued, at: at, actor: voter, cause: httpCause(2),
					detail: mustJSON(map[string]any{"execution_id": x.id})},
				seedEventRow{approvalID: id, seq: 5, typ: approval.EventExecutionAttempt, at: at.Add(time.Millisecond), actor: approval.ActorSystem, cause: worker,
					detail: mustJSON(map[string]any{"execution_id": x.id, "recovered": false})},
				seedEventRow{approvalID: id, seq: 6, typ: approval.EventExecutionSucceeded, at: done, actor: approval.ActorSystem, cause: worker,
					detail: mustJSON(map[string]any{"execution_id": x.id, "status_code": 200})})
		}
		r.executions = append(r.executions, x)
	}
	if a.Status != approval.StatusPending {
		a.Version = 2
	}

	if i%4 == 0 && age < s.InboxRetain {
		received := created.Add(2 * time.Second)
		eventID := "seed-evt-" + strconv.Itoa(i)
		e := seedInboxRow{id: newid.New("inb", received), source: s.Source, eventID: eventID,
			receivedAt: received, processedAt: received.Add(20 * time.Millisecond)}
		e.headers = mustJSON(map[string]string{
			"Content-Type":      "application/json",
			"webhook-id":        eventID,
			"webhook-timestamp": strconv.FormatInt(received.Unix(), 10),
			"webhook-signature": "v1," + base64.StdEncoding.EncodeToString(fp[:]),
		})
		if i%8 == 0 {
			e.typ, e.status, e.approvalID = approval.TypeApprovalDecision, approval.InboxProcessed, id
			e.outcome = "the vote was refused: the approval is no longer pending"
			e.body = fmt.Appendf(nil, `{"type":%q,"data":{"approval_id":%q,"approver":%q,"verdict":"approve"}}`,
				approval.TypeApprovalDecision, id, approvers[0])
		} else {
			e.typ, e.status, e.outcome = "bench.event", approval.InboxIgnored, "no handler for type bench.event"
			e.body = eventBody(eventID, i)
		}
		r.inbox = append(r.inbox, e)
	}

	r.approvals = append(r.approvals, seedApprovalRow{id: id, requester: requester, key: key, fingerprint: a.Fingerprint,
		action: action, title: a.Title, context: a.Context, status: a.Status, decidedAt: a.DecidedAt,
		expiresAt: expires, createdAt: created, version: a.Version})
	for p, name := range approvers {
		r.approvers = append(r.approvers, seedApproverRow{approvalID: id, position: p, approver: name, createdAt: created})
		if a.Status == approval.StatusPending {
			// A pending approval asks its approvers (approval.Ask) while it waits.
			r.asks = append(r.asks, seedApproverRow{approvalID: id, approver: name, createdAt: created})
		}
	}
	r.events = append(r.events, events...)
	return nil
}

// seedContext is the context of approval i, shaped like the scenarios' (about 200 bytes).
func seedContext(i int) []byte {
	commit := sha256.Sum256(strconv.AppendInt(nil, int64(i), 10))
	return fmt.Appendf(nil, `{"change":"Bump the payment client and rotate the read replica pool","commit":"%x","environment":"prod","pipeline":"https://ci.example.com/api/pipelines/%d","service":"api"}`,
		commit[:20], 100000+i)
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// SeedCounts is what a seed wrote, by table.
type SeedCounts struct {
	Approvals, Approvers, Decisions, Events, Executions, Inbox int
	Pending                                                    int
}

func (c *SeedCounts) add(r *seedRows) {
	c.Approvals += len(r.approvals)
	c.Approvers += len(r.approvers)
	c.Decisions += len(r.decisions)
	c.Events += len(r.events)
	c.Executions += len(r.executions)
	c.Inbox += len(r.inbox)
	for _, a := range r.approvals {
		if a.status == approval.StatusPending {
			c.Pending++
		}
	}
}

// Rows returns the number of rows written in all.
func (c SeedCounts) Rows() int {
	return c.Approvals + c.Approvers + c.Decisions + c.Events + c.Executions + c.Inbox
}
