package web

import (
	"context"
	"crypto/hmac"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/approvald/approval"
)

// row is one approval in a list.
type row struct {
	A        *approval.Approval
	TimeLeft string
}

// waitingPage is the data of the "waiting for me" page.
type waitingPage struct {
	Search  search
	Waiting []row
	WaitPg  *pager // ?w=, ?wb=
	Decided []row
	DecPg   *pager // ?d=, ?db=
	// AllDecided: the viewer reads every approval, so Decided lists them all.
	AllDecided bool
}

// search is what the filter form of a list narrows it by: a text in the title (?q=), an
// exact action (?action=), an exact requester (?from=) and, on the list of all approvals, a
// status (?status=) and an approver (?approver=). Blank fields do not filter.
type search struct {
	Query, Action, Requester string
	Status, Approver         string
}

// searchOf reads the filter form's fields from a query, trimmed of the spaces a form keeps.
func searchOf(q url.Values) search {
	return search{
		Query:     strings.TrimSpace(q.Get("q")),
		Action:    strings.TrimSpace(q.Get("action")),
		Requester: strings.TrimSpace(q.Get("from")),
		Status:    strings.TrimSpace(q.Get("status")),
		Approver:  strings.TrimSpace(q.Get("approver")),
	}
}

// Active tells whether the search narrows the lists.
func (s search) Active() bool { return s != search{} }

// filter returns f narrowed by the search. An unknown status is refused as the API refuses it.
func (s search) filter(f approval.ApprovalFilter) (approval.ApprovalFilter, error) {
	f.Query, f.Action, f.Requester = s.Query, s.Action, s.Requester
	if s.Approver != "" {
		f.Approver = s.Approver
	}
	if s.Status != "" {
		st := approval.Status(s.Status)
		if !st.Valid() {
			return f, approval.Errorf(approval.EINVALID, "unknown status %q; use one of pending, approved, rejected, expired, cancelled", s.Status)
		}
		f.Status = st
	}
	return f, nil
}

// handleWaiting is GET /ui/: the pending approvals that ask the viewer now and that the viewer
// has not voted on (Service.Waiting: named approver, or in the current stage of a policy,
// through a group the viewer is in now), newest first, and the decided approvals the viewer may read (all of them for
// operators and admins; for others, those they requested or are listed on), both narrowed by
// the search form's fields. Each list pages by 25 with the store's cursor (?w= and ?d=). A
// search the input policy refuses is a 400 page saying why.
func (s *Server) handleWaiting(w http.ResponseWriter, r *http.Request, sess *session) {
	q := r.URL.Query()
	now := s.now()
	p := sess.principal()
	page := &waitingPage{Search: searchOf(q), WaitPg: pagerOf(Prefix, q, "w"), DecPg: pagerOf(Prefix, q, "d"),
		AllDecided: p.Role.ReadsAll()}
	page.Search.Status, page.Search.Approver = "", "" // not fields of this page's form

	f, _ := page.Search.filter(approval.ApprovalFilter{Limit: pageSize, Cursor: page.WaitPg.Cursor})
	pending, next, err := s.svc.Waiting(r.Context(), p, f)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	for _, a := range pending {
		page.Waiting = append(page.Waiting, row{A: a, TimeLeft: timeLeft(a.ExpiresAt, now)})
	}
	page.WaitPg.next = next

	// The Service narrows the list to what the viewer may read.
	f, _ = page.Search.filter(approval.ApprovalFilter{Decided: true, Limit: pageSize, Cursor: page.DecPg.Cursor})
	listed, next, err := s.svc.Approvals(r.Context(), p, f)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	for _, a := range listed {
		page.Decided = append(page.Decided, row{A: a})
	}
	page.DecPg.next = next
	s.render(w, r, http.StatusOK, "waiting", sess, page)
}

// listPage is the data of the page of all approvals.
type listPage struct {
	Search   search
	Statuses []approval.Status
	Rows     []row
	Pg       *pager // ?c=, ?cb=
	ReadsAll bool   // the viewer reads every approval
}

// handleApprovals is GET /ui/approvals: every approval the viewer may read (all of them for
// operators and admins), newest first, with the filters of GET /v1/approvals (status,
// action, requester, approver, a text in the title), 25 a page with Next and Previous. A
// filter the API would refuse is a 400 page saying why.
func (s *Server) handleApprovals(w http.ResponseWriter, r *http.Request, sess *session) {
	q := r.URL.Query()
	p := sess.principal()
	page := &listPage{Search: searchOf(q), Statuses: approval.Statuses, Pg: pagerOf(Prefix+"approvals", q, "c"), ReadsAll: p.Role.ReadsAll()}
	f, err := page.Search.filter(approval.ApprovalFilter{Limit: pageSize, Cursor: page.Pg.Cursor})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	list, next, err := s.svc.Approvals(r.Context(), p, f)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	now := s.now()
	for _, a := range list {
		rw := row{A: a}
		if a.Status == approval.StatusPending {
			rw.TimeLeft = timeLeft(a.ExpiresAt, now)
		}
		page.Rows = append(page.Rows, rw)
	}
	page.Pg.next = next
	s.render(w, r, http.StatusOK, "approvals", sess, page)
}

// approvalPage is the data of an approval's page.
type approvalPage struct {
	A         *approval.Approval
	Status    statusView
	TimeLeft  string
	Context   node
	Events    []approval.Event
	Trail     []trailItem
	Required  int
	Approvals int
	// Policy is the progress of an approval created under a policy: each stage's rules, who
	// counted toward them, the stage asked now; nil for one whose request named its approvers.
	Policy *approval.PolicyStatus
	// Approving says what approving does: the call to the action's target, or that the
	// requester runs it.
	Approving  string
	CanDecide  bool   // the forms are shown
	Token      string // the forms' decision token
	NotNow     string // why a listed approver who has not voted cannot vote now
	MyDecision *approval.Decision
	Answer     *answer // set on the answer page after a decision
	Kept       string  // the comment of a vote refused, shown for copying
}

// handleApproval is GET /ui/approvals/{id}.
func (s *Server) handleApproval(w http.ResponseWriter, r *http.Request, sess *session) {
	page, err := s.approvalPage(r.Context(), sess, r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, "approval", sess, page)
}

// approvalPage reads what an approval's page shows, or ENOTFOUND when the viewer may not see
// it (the Service's reads decide, as for the API).
func (s *Server) approvalPage(ctx context.Context, sess *session, id string) (*approvalPage, error) {
	p := sess.principal()
	a, err := s.svc.Approval(ctx, p, id)
	if err != nil {
		return nil, err
	}
	events, err := s.store.Events(ctx, id)
	if err != nil {
		return nil, err
	}
	page := &approvalPage{
		A: a, Status: approvalStatus(a.Status), TimeLeft: timeLeft(a.ExpiresAt, s.now()),
		Context: contextTree(a.Context), Events: events, Trail: trailOf(events),
		Required: a.RequiredApprovals, Approvals: a.Approvals(),
		Approving: s.approving(a),
	}
	if a.Resolved != nil {
		members, err := s.svc.ProgressMembers(ctx, a)
		if err != nil {
			return nil, err
		}
		page.Policy = a.PolicyStatus(members)
	}
	if d, ok := a.DecisionBy(sess.Subject); ok {
		page.MyDecision = &d
	}
	// Whether a vote counts is the Service's rule, asked again when the vote comes; the page
	// offers the forms to whom it would take the vote now, and tells a listed approver who
	// may not vote yet why.
	// A person a policy's group takes in after the create may vote though not listed.
	listed := a.IsApprover(sess.Subject)
	if a.Status == approval.StatusPending && p.MayDecide() && (listed || a.Resolved != nil) && page.MyDecision == nil {
		ok, why, err := s.svc.MayVoteNow(ctx, p, a)
		if err != nil {
			return nil, err
		}
		if ok {
			page.CanDecide = true
			page.Token = s.decisionToken(sess, a.ID)
		} else if listed {
			page.NotNow = why
		}
	}
	return page, nil
}

// approving says what approving a does: a call to its action's target, made and recorded by
// approvald, or nothing here, the requester running it.
func (s *Server) approving(a *approval.Approval) string {
	if e := a.Execution; e != nil && e.Status == approval.ExecutionNotConfigured {
		return "Approving runs nothing here: the requester, " + a.Requester + ", runs it once told the outcome."
	}
	if u, ok := s.targets[a.Action]; ok {
		return "Approving calls the target of " + a.Action + ": POST " + shownURL(u) + ". approvald makes the call and records its outcome."
	}
	if s.svc.Targeted != nil && s.svc.Targeted(a.Action) {
		return "Approving calls the target configured for " + a.Action + ". approvald makes the call and records its outcome."
	}
	return "Approving runs nothing here: the requester, " + a.Requester + ", runs it once told the outcome."
}

// shownURL is a target's URL as a page shows it: scheme, host and path, without the user
// information, query or fragment that may hold secrets.
func shownURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "(the configured URL)"
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}).String()
}

// handleDecide is POST /ui/approvals/{id}/approve and /reject. The form's decision token must
// be valid for this session and approval; the vote goes through Service.Decide, and the
// browser is sent (303) to the answer page, which says what happened. A second submit of
// the same form in this process waits for the first and is sent to the same answer.
//
// A vote refused before anything is read or written, because its session is refused (ended,
// expired, unknown, signed with another key) or its form's token is not this session's, is
// answered with a page that says the vote was not recorded, keeps the comment in a form and
// links to signing in again, or to the approval (voteNotRecorded). So is a vote that failed
// because the database could not be used (EUNAVAILABLE, a deadline passed included), whose
// page offers to send it again.
func (s *Server) handleDecide(verdict approval.Verdict) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		sess, err := s.session(r)
		if err != nil {
			err = approval.Unfinished(r.Context(), err)
			if code := approval.ErrorCode(err); code != approval.EUNAUTHORIZED && code != approval.EUNAVAILABLE {
				s.fail(w, r, err)
				return
			}
			// Who sent it is not known: its bytes come out of the budget of such bodies.
			if ferr := s.readFormWithin(w, r, maxFormBody, true); ferr != nil {
				s.fail(w, r, ferr)
				return
			}
			s.voteNotRecorded(w, r, nil, id, verdict, err)
			return
		}
		requestOf(r).subject = sess.Subject
		if err := s.readForm(w, r); err != nil {
			s.fail(w, r, err)
			return
		}
		nonce, expires, err := s.checkDecisionToken(r.PostFormValue("token"), sess, id)
		if err != nil {
			s.voteNotRecorded(w, r, sess, id, verdict, err)
			return
		}
		p := sess.principal()
		comment := r.PostFormValue("comment")
		if err := approval.CheckText("comment", comment); err != nil {
			s.fail(w, r, err)
			return
		}
		answerURL := s.answerURL(sess, id, verdict)

		f, first := s.forms.claim(nonce, expires, s.now())
		if !first {
			select {
			case <-f.done:
			case <-r.Context().Done():
				return
			}
			http.Redirect(w, r, answerURL, http.StatusSeeOther)
			return
		}
		defer close(f.done)
		_, err = s.svc.Decide(r.Context(), p, approval.DecideRequest{
			ApprovalID: id, Verdict: verdict, Comment: comment, Cause: cause(r),
		})
		if err = approval.Unfinished(r.Context(), err); approval.ErrorCode(err) == approval.EUNAVAILABLE {
			// The form may be sent again: this one did not get through.
			s.forms.forget(nonce)
			// A commit whose answer was lost may have recorded the vote: when the approval
			// can be read and shows it, the vote's answer is the truth.
			if s.voteOnRecord(r.Context(), sess, id, verdict) {
				http.Redirect(w, r, answerURL, http.StatusSeeOther)
				return
			}
			s.voteNotRecorded(w, r, sess, id, verdict, err)
			return
		}
		if approval.ErrorCode(err) == approval.EFORBIDDEN {
			s.voteRefused(w, r, sess, id, verdict, comment, err)
			return
		}
		// A conflict (decided by someone else, the other verdict already given, expired) is
		// an answer, not a failure: the answer page says what happened.
		if err != nil && approval.ErrorCode(err) != approval.ECONFLICT {
			s.fail(w, r, err)
			return
		}
		http.Redirect(w, r, answerURL, http.StatusSeeOther)
	}
}

// voteRefused answers a vote the Service refused for err (EFORBIDDEN: the viewer may not
// vote on it, or not now, as an approver of a later stage or one taken out of a group): the
// approval's page, 403, headed by the refusal in words, with the comment kept. Nothing was
// written.
func (s *Server) voteRefused(w http.ResponseWriter, r *http.Request, sess *session, id string, verdict approval.Verdict, comment string, err error) {
	page, perr := s.approvalPage(r.Context(), sess, id)
	if perr != nil {
		s.fail(w, r, perr)
		return
	}
	noun := map[approval.Verdict]string{approval.VerdictApprove: "approval", approval.VerdictReject: "rejection"}[verdict]
	page.Answer = &answer{Lead: "Your " + noun + " was not recorded", Tail: ": " + approval.ErrorMessage(err) + ". Nothing changed."}
	page.Kept = comment
	s.render(w, r, http.StatusForbidden, "approval", sess, page)
}

// voteOnRecord reports whether the approval id can be read and holds sess's verdict.
func (s *Server) voteOnRecord(ctx context.Context, sess *session, id string, verdict approval.Verdict) bool {
	a, err := s.svc.Approval(ctx, sess.principal(), id)
	if err != nil {
		return false
	}
	d, ok := a.DecisionBy(sess.Subject)
	return ok && d.Verdict == verdict
}

// notRecordedPage is the data of the page that answers a vote refused before it was read,
// or failed for want of the database: what was not recorded and why, the comment kept, and
// where to go next.
type notRecordedPage struct {
	ApprovalID string
	Noun       string // "approval" or "rejection"
	Reason     string // the refusal, in words
	Comment    string
	// SignIn is set when the session was refused: the sign-in link returns to the approval.
	SignIn string
	// Unavailable is set when the database could not be used: the page's form sends the same
	// vote (Verdict, with the form's decision Token) again.
	Unavailable bool
	Verdict     approval.Verdict
	Token       string
}

// voteNotRecorded answers a vote refused for err before anything was read or written, or
// failed because the database could not be used: a browser gets a page saying plainly that
// the vote was not recorded, with the comment kept in a form and a link to sign in again (the
// session was refused), to the approval (its form was refused), or a button to send the same
// vote again (EUNAVAILABLE: 503 with Retry-After), with err's status; anyone else gets err as
// problem+json.
func (s *Server) voteNotRecorded(w http.ResponseWriter, r *http.Request, sess *session, id string, verdict approval.Verdict, err error) {
	if !strings.Contains(r.Header.Get("Accept"), "text/html") {
		s.fail(w, r, err)
		return
	}
	page := notRecordedPage{
		ApprovalID: id,
		Noun:       map[approval.Verdict]string{approval.VerdictApprove: "approval", approval.VerdictReject: "rejection"}[verdict],
		Reason:     approval.ErrorMessage(err),
		Comment:    r.PostFormValue("comment"),
	}
	if page.Noun == "" {
		page.Noun = "vote"
	}
	status := http.StatusForbidden
	switch approval.ErrorCode(err) {
	case approval.EUNAUTHORIZED:
		status = http.StatusUnauthorized
		page.SignIn = Prefix + "signin?" + url.Values{"next": {ApprovalPath(id)}}.Encode()
	case approval.EUNAVAILABLE:
		s.log.Error("web: a vote was not recorded: the database is unavailable", "request_id", requestID(r), "approval_id", id, "error", err)
		status = http.StatusServiceUnavailable
		page.Unavailable, page.Verdict, page.Token = true, verdict, r.PostFormValue("token")
		retry := time.Second
		if e := approval.AsError(err); e != nil && e.RetryAfter > retry {
			retry = e.RetryAfter
		}
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(retry.Seconds()))))
	}
	s.render(w, r, status, "notrecorded", sess, page)
}

// answerURL is the answer page of the viewer's verdict on approval id, signed so that the
// page cannot be made to claim a vote the viewer did not submit.
func (s *Server) answerURL(sess *session, id string, verdict approval.Verdict) string {
	sig := base64.RawURLEncoding.EncodeToString(s.mac("answer", answerMACInput(sess, id, verdict)))
	return ApprovalPath(id) + "/answer?" + url.Values{"v": {string(verdict)}, "s": {sig}}.Encode()
}

func answerMACInput(sess *session, id string, verdict approval.Verdict) []byte {
	return []byte(sess.ID + "\x00" + id + "\x00" + string(verdict))
}

// answer is what happened to the viewer's vote, in words.
type answer struct {
	Recorded bool
	Lead     string     // "You approved this." / "Already rejected by bob"
	At       *time.Time // when the vote or the outcome was
	Tail     string     // what follows the time
	Status   string     // what the approval now waits for, when the vote was recorded
}

// handleAnswer is GET /ui/approvals/{id}/answer: the approval's page, headed by what
// happened to the vote the viewer submitted.
func (s *Server) handleAnswer(w http.ResponseWriter, r *http.Request, sess *session) {
	id := r.PathValue("id")
	verdict := approval.Verdict(r.URL.Query().Get("v"))
	sig, err := base64.RawURLEncoding.DecodeString(r.URL.Query().Get("s"))
	if err != nil || !verdict.Valid() || !hmac.Equal(sig, s.mac("answer", answerMACInput(sess, id, verdict))) {
		s.fail(w, r, approval.Errorf(approval.EINVALID, "this answer link is not valid for you; open the approval instead"))
		return
	}
	page, err := s.approvalPage(r.Context(), sess, id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	page.Answer = answerFor(page.A, page.Events, sess.Subject, verdict)
	s.render(w, r, http.StatusOK, "approval", sess, page)
}

// answerFor says what became of me's verdict on a, from the approval as it now is: the vote
// is on record, or the approval was decided first, or me had voted the other way.
func answerFor(a *approval.Approval, events []approval.Event, me string, verdict approval.Verdict) *answer {
	noun := map[approval.Verdict]string{approval.VerdictApprove: "approval", approval.VerdictReject: "rejection"}[verdict]
	past := map[approval.Verdict]string{approval.VerdictApprove: "approved", approval.VerdictReject: "rejected"}
	if d, ok := a.DecisionBy(me); ok {
		at := d.At
		if d.Verdict == verdict {
			ans := &answer{Recorded: true, Lead: "You " + past[verdict] + " this", At: &at, Tail: "."}
			switch a.Status {
			case approval.StatusPending:
				ans.Status = fmt.Sprintf("%d of %d approvals so far; it waits for the other approvers.", a.Approvals(), a.RequiredApprovals)
			default:
				ans.Status = "The request is now " + string(a.Status) + "."
			}
			return ans
		}
		return &answer{Lead: "You had already " + past[d.Verdict] + " this", At: &at, Tail: "; your " + noun + " was not recorded."}
	}
	if a.Status.Terminal() {
		ans := &answer{Lead: "Already " + string(a.Status), At: a.DecidedAt, Tail: "; your " + noun + " was not recorded."}
		// The event that ended it names who did.
		for i := len(events) - 1; i >= 0; i-- {
			if e := events[i]; e.Type == "approval."+string(a.Status) {
				at := e.At
				ans.At = &at
				if e.Actor != approval.ActorSystem {
					ans.Lead += " by " + e.Actor
				}
				break
			}
		}
		return ans
	}
	return &answer{Lead: "Your " + noun + " was not recorded", Tail: ". Nothing changed; try again."}
}

// waitAnswer is the JSON answer of the page's long-poll: the approval's version and status,
// and what a page that keeps its form (a comment is being typed) shows beside it instead of
// reloading: the status's badge, what changed in words, and whether the viewer may still
// vote on it.
type waitAnswer struct {
	Version int64           `json:"version"`
	Status  approval.Status `json:"status"`
	Badge   statusView      `json:"badge"`
	Said    string          `json:"said"`
	CanVote bool            `json:"can_vote"`
	// Approvals and Required count the approvals so far against those needed; Votes are the
	// votes so far, oldest first, as the page lists them.
	Approvals int        `json:"approvals"`
	Required  int        `json:"required"`
	Votes     []waitVote `json:"votes"`
	// Stage and Progress are, under a policy, the stage asked and its rules' progress
	// (PolicyStatus.StageLine and ProgressLine); absent otherwise.
	Stage    string `json:"stage,omitempty"`
	Progress string `json:"progress,omitempty"`
}

// waitVote is one vote in the long-poll's answer.
type waitVote struct {
	Approver string           `json:"approver"`
	Verdict  approval.Verdict `json:"verdict"`
	At       string           `json:"at"` // RFC 3339, UTC
	Comment  string           `json:"comment,omitempty"`
}

// waitAnswerOf is the long-poll's answer about a, for the viewer sess.
func waitAnswerOf(a *approval.Approval, sess *session) waitAnswer {
	ans := waitAnswer{Version: a.Version, Status: a.Status, Badge: approvalStatus(a.Status),
		Approvals: a.Approvals(), Required: a.RequiredApprovals, Votes: []waitVote{}}
	for _, d := range a.Decisions {
		ans.Votes = append(ans.Votes, waitVote{Approver: d.Approver, Verdict: d.Verdict, At: d.At.UTC().Format(time.RFC3339), Comment: d.Comment})
	}
	_, mine := a.DecisionBy(sess.Subject)
	ans.CanVote = a.Status == approval.StatusPending && !mine && a.IsApprover(sess.Subject) && sess.principal().MayDecide()
	var last *approval.Decision
	if n := len(a.Decisions); n > 0 {
		last = &a.Decisions[n-1]
	}
	past := map[approval.Verdict]string{approval.VerdictApprove: "approved", approval.VerdictReject: "rejected"}
	at := func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04 UTC") }
	switch {
	case a.Status == approval.StatusPending && last != nil:
		who := last.Approver
		if approval.SameName(who, sess.Subject) {
			who = "You"
		}
		ans.Said = fmt.Sprintf("%s %s this at %s; %d of %d approvals so far.", who, past[last.Verdict], at(last.At), a.Approvals(), a.RequiredApprovals)
	case a.Status == approval.StatusPending:
		ans.Said = "The approval changed; it is still pending."
	default:
		ans.Said = "This request is now " + string(a.Status)
		if (a.Status == approval.StatusApproved || a.Status == approval.StatusRejected) && last != nil {
			ans.Said += " (" + last.Approver + " " + past[last.Verdict] + " it)"
		}
		if a.DecidedAt != nil {
			ans.Said += " at " + at(*a.DecidedAt)
		}
		ans.Said += "."
	}
	return ans
}

// handleWait is GET /ui/approvals/{id}/wait?version=N, the long-poll of a pending approval's
// page: it answers as soon as the approval's version exceeds N, or after the long-poll wait,
// as GET /v1/approvals/{id}?wait= does: woken by the store's signal of this approval
// (approval.TopicApproval) and re-reading at an interval, since signals can be lost.
func (s *Server) handleWait(w http.ResponseWriter, r *http.Request, sess *session) {
	id := r.PathValue("id")
	var version int64
	if _, err := fmt.Sscan(r.URL.Query().Get("version"), &version); err != nil || version < 0 {
		s.fail(w, r, approval.Errorf(approval.EINVALID, "version must be the non-negative version the page shows"))
		return
	}
	changed, unsubscribe := s.store.Subscribe(approval.TopicApproval(id))
	defer unsubscribe()
	timeout := time.NewTimer(s.pollWait)
	defer timeout.Stop()
	poll := time.NewTicker(s.pollEvery)
	defer poll.Stop()
	p := sess.principal()
	for {
		a, err := s.svc.Approval(r.Context(), p, id)
		if err != nil {
			if r.Context().Err() != nil {
				return
			}
			s.fail(w, r, err)
			return
		}
		if a.Version > version {
			s.writeWait(w, r, a, sess)
			return
		}
		select {
		case _, ok := <-changed:
			if !ok {
				changed = nil
			}
		case <-poll.C:
		case <-timeout.C:
			s.writeWait(w, r, a, sess)
			return
		case <-r.Context().Done():
			return
		}
	}
}

// writeWait writes the long-poll's answer about a; whether the viewer may still vote is the
// Service's MayVoteNow, as for the page's forms.
func (s *Server) writeWait(w http.ResponseWriter, r *http.Request, a *approval.Approval, sess *session) {
	ans := waitAnswerOf(a, sess)
	if _, voted := a.DecisionBy(sess.Subject); a.Resolved != nil && a.Status == approval.StatusPending && !voted && sess.principal().MayDecide() {
		ok, _, err := s.svc.MayVoteNow(r.Context(), sess.principal(), a)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		ans.CanVote = ok
	}
	if a.Resolved != nil {
		members, err := s.svc.ProgressMembers(r.Context(), a)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		if st := a.PolicyStatus(members); st != nil {
			ans.Stage, ans.Progress = st.StageLine(), st.ProgressLine()
		}
	}
	writeJSON(w, ans)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(v)
}
