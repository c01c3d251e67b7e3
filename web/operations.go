package web

import (
	"net/http"

	"github.com/approvald/approval"
)

// operationsPage is the data of the operators' page. Each list pages by 25 on its own
// (pagers nr, fl, pl, if, is); the lists of executions past their lease and of stuck inbox
// events page through the running executions and the pending inbox events, of which they
// show those past their time, so a page of them can hold fewer than 25.
type operationsPage struct {
	NeedsReview []*approval.ExecutionRecord
	Failed      []*approval.ExecutionRecord
	PastLease   []*approval.ExecutionRecord // running, the lease run out: the worker may have died
	InboxFailed []*approval.InboxEvent
	InboxStuck  []*approval.InboxEvent // pending, due long ago: no worker is taking them
	Done        string                 // what the last action did, from a fixed set

	ReviewPg, FailedPg, LeasePg, InboxFailedPg, StuckPg *pager
	// Titles are the titles of the executions' approvals, by approval id.
	Titles map[string]string
}

// doneMessages are the confirmations the page shows after an action (?done=).
var doneMessages = map[string]string{
	"retried":  "The execution is queued again.",
	"resolved": "The execution's outcome is recorded.",
	"requeued": "The inbox event is queued again.",
}

// handleOperations is GET /ui/operations, for operators and admins: executions that need a
// person (needs_review, failed), running executions past their lease, and failed or stuck
// inbox events, each execution named by its approval's title. It reads the Service's
// listings, the same as GET /v1/executions and /v1/inbox, which refuse a viewer who may not
// operate.
func (s *Server) handleOperations(w http.ResponseWriter, r *http.Request, sess *session) {
	ctx, p, q := r.Context(), sess.principal(), r.URL.Query()
	path := Prefix + "operations"
	page := &operationsPage{Done: doneMessages[q.Get("done")],
		ReviewPg: pagerOf(path, q, "nr"), FailedPg: pagerOf(path, q, "fl"), LeasePg: pagerOf(path, q, "pl"),
		InboxFailedPg: pagerOf(path, q, "if"), StuckPg: pagerOf(path, q, "is")}
	executions := func(st approval.ExecutionStatus, pg *pager) ([]*approval.ExecutionRecord, error) {
		list, next, err := s.svc.Executions(ctx, p, approval.ExecutionFilter{Status: st, Limit: pageSize, Cursor: pg.Cursor})
		pg.next = next
		return list, err
	}
	var err error
	if page.NeedsReview, err = executions(approval.ExecutionNeedsReview, page.ReviewPg); err != nil {
		s.fail(w, r, err)
		return
	}
	if page.Failed, err = executions(approval.ExecutionFailed, page.FailedPg); err != nil {
		s.fail(w, r, err)
		return
	}
	running, err := executions(approval.ExecutionRunning, page.LeasePg)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	now := s.now()
	for _, e := range running {
		if e.LeaseExpiresAt != nil && e.LeaseExpiresAt.Before(now) {
			page.PastLease = append(page.PastLease, e)
		}
	}
	inbox := func(st approval.InboxStatus, pg *pager) ([]*approval.InboxEvent, error) {
		list, next, err := s.svc.InboxEvents(ctx, p, approval.InboxFilter{Status: st, Limit: pageSize, Cursor: pg.Cursor})
		pg.next = next
		return list, err
	}
	if page.InboxFailed, err = inbox(approval.InboxFailed, page.InboxFailedPg); err != nil {
		s.fail(w, r, err)
		return
	}
	pending, err := inbox(approval.InboxPending, page.StuckPg)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	for _, e := range pending {
		if e.NextAttemptAt != nil && e.NextAttemptAt.Before(now.Add(-s.stuckAfter)) {
			page.InboxStuck = append(page.InboxStuck, e)
		}
	}
	var ids []string
	for _, list := range [][]*approval.ExecutionRecord{page.NeedsReview, page.Failed, page.PastLease} {
		for _, e := range list {
			ids = append(ids, e.ApprovalID)
		}
	}
	approvals, err := s.svc.ApprovalsByID(ctx, p, ids)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	page.Titles = make(map[string]string, len(approvals))
	for id, a := range approvals {
		page.Titles[id] = a.Title
	}
	s.render(w, r, http.StatusOK, "operations", sess, page)
}

// operatorForm checks an operator's form post: the form token, the body's size. The Service
// refuses a role that may not operate.
func (s *Server) operatorForm(w http.ResponseWriter, r *http.Request, sess *session) (approval.Principal, approval.Cause, error) {
	p := sess.principal()
	if err := s.readForm(w, r); err != nil {
		return p, approval.Cause{}, err
	}
	if err := s.checkForm(r, sess); err != nil {
		return p, approval.Cause{}, err
	}
	c := cause(r)
	return p, approval.Cause{Kind: approval.CauseOperator, Operator: p.Subject, RequestID: c.RequestID, Source: c.Source}, nil
}

// handleRetryExecution is POST /ui/executions/{id}/retry: Service.RetryExecution.
func (s *Server) handleRetryExecution(w http.ResponseWriter, r *http.Request, sess *session) {
	p, c, err := s.operatorForm(w, r, sess)
	if err == nil {
		_, err = s.svc.RetryExecution(r.Context(), p, r.PathValue("id"), c)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	http.Redirect(w, r, Prefix+"operations?done=retried", http.StatusSeeOther)
}

// handleResolveExecution is POST /ui/executions/{id}/resolve with outcome and note:
// Service.ResolveExecution, which refuses a role that may not operate and then checks the
// outcome and the (required) note, as for the API.
func (s *Server) handleResolveExecution(w http.ResponseWriter, r *http.Request, sess *session) {
	p, c, err := s.operatorForm(w, r, sess)
	if err == nil {
		outcome := approval.ExecutionStatus(r.PostFormValue("outcome"))
		_, err = s.svc.ResolveExecution(r.Context(), p, r.PathValue("id"), outcome, r.PostFormValue("note"), c)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	http.Redirect(w, r, Prefix+"operations?done=resolved", http.StatusSeeOther)
}

// handleRetryInbox is POST /ui/inbox/{id}/retry: a failed inbox event is queued again.
func (s *Server) handleRetryInbox(w http.ResponseWriter, r *http.Request, sess *session) {
	p, _, err := s.operatorForm(w, r, sess)
	if err == nil {
		_, err = s.svc.RetryInbox(r.Context(), p, r.PathValue("id"))
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.log.Info("inbox event re-queued", "event", r.PathValue("id"), "operator", p.Subject)
	http.Redirect(w, r, Prefix+"operations?done=requeued", http.StatusSeeOther)
}
