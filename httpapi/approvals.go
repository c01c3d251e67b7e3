package httpapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/approvald/approval"
)

// maxWait caps ?wait= of a long-poll, so that a request never outlives proxies' idle timeouts.
const maxWait = 60 * time.Second

// handleCreateApproval is POST /v1/approvals: one approval per Idempotency-Key and requester,
// however often and however concurrently the request is sent (docs/invariants.md, invariant
// 2). The protocol itself is approval.Service.Create; the handler speaks HTTP around it.
func (s *Server) handleCreateApproval(w http.ResponseWriter, r *http.Request) {
	// A create runs to its end even if the client goes away: a committed create is what its
	// retry will replay. The create's one transaction is bounded by s.lease.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), s.lease)
	defer cancel()

	// Everything that can refuse the request runs before the one write, so a 400, 401, 403
	// or 413 stores nothing and the caller may correct it and reuse the key. A known token is
	// re-checked inside that write (authenticateFirstTrip). A role that may not create is
	// refused (403) before the key and the body are looked at, as the contract orders it; the
	// Service checks it again in Create.
	ctx, p, err := s.authenticateFirstTrip(ctx, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := p.CheckCreate(); err != nil {
		s.writeError(w, r, err)
		return
	}
	key, err := idempotencyKey(r.Header)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	body, err := readBody(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}

	res, err := s.svc.Create(ctx, p, approval.CreateCommand{
		Key:  key,
		Body: body,
		Decode: func() (req approval.CreateRequest, err error) {
			return req, decodeObject(body, &req)
		},
		Cause:   s.cause(r),
		Respond: s.created,
	})
	if err != nil {
		s.writeCreateError(w, r, err)
		return
	}
	if err := s.settle(r); err != nil {
		s.writeError(w, r, err)
		return
	}
	if res.Replayed {
		s.metrics.replays.Inc()
		w.Header().Set("Idempotent-Replayed", "true")
	}
	if res.Response == nil { // the stored answer outlived its retention
		s.writeJSON(w, r, http.StatusOK, s.present(r.Context(), res.Approval))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if res.Response.Location != "" {
		w.Header().Set("Location", res.Response.Location)
	}
	w.WriteHeader(res.Response.StatusCode)
	w.Write(res.Response.Body)
}

// created renders the 201 answer to a create, the response stored for replays.
func (s *Server) created(a *approval.Approval) (approval.StoredResponse, error) {
	body, err := marshal(s.presentWith(s.svc.Members, a)) // a new approval: no votes to count
	if err != nil {
		return approval.StoredResponse{}, err
	}
	return approval.StoredResponse{
		StatusCode: http.StatusCreated,
		Location:   approval.CreatePath + "/" + url.PathEscape(a.ID),
		Body:       body,
	}, nil
}

// writeCreateError answers a failed create, counting idempotency conflicts. A create answers
// 409 only when its database work was cut short by a lock wait it lost (for example a
// serialization failure); it carries Retry-After, since the caller should come back.
func (s *Server) writeCreateError(w http.ResponseWriter, r *http.Request, err error) {
	switch approval.ErrorCode(err) {
	case approval.ECONFLICT:
		s.metrics.conflicts.WithLabelValues(conflictInFlight).Inc()
		if e := approval.AsError(err); e.RetryAfter <= 0 {
			retry := *e
			retry.RetryAfter = time.Second
			err = &retry
		}
	case approval.EMISMATCH:
		s.metrics.conflicts.WithLabelValues(conflictMismatch).Inc()
	}
	s.writeError(w, r, err)
}

// handleGetApproval is GET /v1/approvals/{id}. With ?wait=D&version=N it is a long-poll: it
// answers as soon as the approval's version exceeds N, or after D (at most maxWait) with the
// approval as it is, 200 either way.
func (s *Server) handleGetApproval(w http.ResponseWriter, r *http.Request) {
	wait, version, err := parseWait(r.URL.Query())
	if wait == 0 && err == nil {
		// One round trip: the token's check goes with the read (authenticateFirstTrip).
		ctx, p, err := s.authenticateFirstTrip(r.Context(), r)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		a, err := s.readableApproval(ctx, p, r.PathValue("id"))
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		s.writeJSON(w, r, http.StatusOK, s.present(r.Context(), a))
		return
	}
	p, err2 := s.authenticate(r.Context(), r)
	if err2 != nil {
		s.writeError(w, r, err2)
		return
	}
	id := r.PathValue("id")
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if wait == 0 {
		a, err := s.readableApproval(r.Context(), p, id)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		s.writeJSON(w, r, http.StatusOK, s.present(r.Context(), a))
		return
	}
	s.longPoll(w, r, p, id, version, wait)
}

// finalReadTimeout bounds the read that answers a long-poll whose request context has ended.
const finalReadTimeout = 2 * time.Second

// longPoll answers the approval id once its version exceeds version, or after wait.
//
// It wakes on the store's signal of this approval (approval.TopicApproval), which every
// committed change of it raises, whichever replica or worker made it (PostgreSQL delivers it
// by NOTIFY), and re-reads the approval; changes of other approvals do not wake it, so a
// thousand waiting long-polls cost a change one read, not a thousand. Signals are hints that
// can be lost, so it also re-reads every pollInterval.
//
// When the request's context ends first (the server shutting down cancels it, or the client
// left) it still answers 200 with the approval, read on a context of its own: docs/http-api.md
// promises 200 either way, and if the client is really gone nothing is lost.
func (s *Server) longPoll(w http.ResponseWriter, r *http.Request, p principal, id string, version int64, wait time.Duration) {
	// Subscribe before the first read, so that a change committed between the read and the
	// wait still finds its signal in the channel.
	changed, unsubscribe := s.store.Subscribe(approval.TopicApproval(id))
	defer unsubscribe()
	s.longPolls.Add(1)
	defer s.longPolls.Add(-1)

	ctx := r.Context()
	timeout := time.NewTimer(wait)
	defer timeout.Stop()
	poll := time.NewTicker(s.pollInterval)
	defer poll.Stop()
waiting:
	for {
		a, err := s.readableApproval(ctx, p, id)
		if err != nil {
			if ctx.Err() != nil {
				break waiting // the read was cut short by the context: answer below
			}
			s.writeError(w, r, err)
			return
		}
		if a.Version > version {
			s.writeJSON(w, r, http.StatusOK, s.present(r.Context(), a))
			return
		}
		select {
		case _, ok := <-changed:
			if !ok {
				changed = nil // the store closed the subscription; the next read will say why
			}
		case <-poll.C:
		case <-timeout.C:
			s.writeJSON(w, r, http.StatusOK, s.present(r.Context(), a))
			return
		case <-ctx.Done():
			break waiting
		}
	}

	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		// The request's deadline is its wait and a request's timeout: a read held it.
		s.writeError(w, r, approval.DeadlinePassed())
		return
	}
	ctx, cancel := detached(r, finalReadTimeout)
	defer cancel()
	a, err := s.readableApproval(ctx, p, id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, s.present(r.Context(), a))
}

// parseWait reads the long-poll parameters: wait as a Go duration ("30s") or whole seconds,
// capped at maxWait, and the version the caller already has, which wait requires.
func parseWait(q url.Values) (time.Duration, int64, error) {
	if !q.Has("wait") {
		return 0, 0, nil
	}
	raw := q.Get("wait")
	wait, err := time.ParseDuration(raw)
	if err != nil {
		secs, serr := strconv.Atoi(raw)
		if serr != nil {
			return 0, 0, approval.Errorf(approval.EINVALID, "wait %q is not a duration such as 30s", raw)
		}
		wait = time.Duration(secs) * time.Second
	}
	if wait < 0 {
		return 0, 0, approval.Errorf(approval.EINVALID, "wait %q is negative", raw)
	}
	wait = min(wait, maxWait)

	if !q.Has("version") {
		return 0, 0, approval.Errorf(approval.EINVALID, "wait needs version=N, the version you already have; the answer comes when the version exceeds it")
	}
	version, err := strconv.ParseInt(q.Get("version"), 10, 64)
	if err != nil || version < 0 {
		return 0, 0, approval.Errorf(approval.EINVALID, "version %q is not a non-negative integer", q.Get("version"))
	}
	return wait, version, nil
}

// readableApproval returns the approval if p may see it, and ENOTFOUND otherwise, so that
// approvals p may not see are indistinguishable from ones that do not exist
// (approval.Service.Approval decides).
func (s *Server) readableApproval(ctx context.Context, p principal, id string) (*approval.Approval, error) {
	return s.svc.Approval(ctx, p, id)
}

// approvalList is the answer of GET /v1/approvals.
type approvalList struct {
	Approvals  []*approval.Approval `json:"approvals"`
	NextCursor string               `json:"next_cursor"`
}

// handleListApprovals is GET /v1/approvals?status=&approver=&requester=&action=&q=&waiting=&limit=&cursor=,
// newest first. Requesters and approvers see the approvals they requested or are listed on;
// waiting=true lists what waits for the token's subject (Service.Waiting).
func (s *Server) handleListApprovals(w http.ResponseWriter, r *http.Request) {
	// A known token is checked by the page's own statement (authenticateFirstTrip); the
	// answer, whatever it is, settles the check first.
	ctx, p, err := s.authenticateFirstTrip(r.Context(), r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	q := r.URL.Query()
	f := approval.ApprovalFilter{
		Status: approval.Status(q.Get("status")),
		// Names compare normalised, as the rules compare them (docs/security.md, "Names"); a
		// name that does not normalise is kept as given, to find rows stored before.
		Approver:  approval.NameKey(q.Get("approver")),
		Requester: approval.NameKey(q.Get("requester")),
		Action:    q.Get("action"),
		Query:     q.Get("q"),
		Cursor:    q.Get("cursor"),
	}
	if f.Status != "" && !f.Status.Valid() {
		s.writeError(w, r, approval.Errorf(approval.EINVALID, "status %q is not one of pending, approved, rejected, expired, cancelled", f.Status))
		return
	}
	if f.Limit, err = parseLimit(q.Get("limit")); err != nil {
		s.writeError(w, r, err)
		return
	}
	list, next := []*approval.Approval(nil), ""
	switch waiting := q.Get("waiting"); waiting {
	case "true":
		// What waits for the token's subject now (docs/policies.md, "Waiting for me"): pending,
		// and whom it asks; a status or an approver would ask something else.
		if q.Get("status") != "" || q.Get("approver") != "" {
			s.writeError(w, r, approval.Errorf(approval.EINVALID, "waiting=true lists the pending approvals waiting for the token's subject; leave out status and approver"))
			return
		}
		list, next, err = s.svc.Waiting(ctx, p, f)
	case "", "false":
		// The Service keeps the listing to what p may read.
		list, next, err = s.svc.Approvals(ctx, p, f)
	default:
		s.writeError(w, r, approval.Errorf(approval.EINVALID, "waiting %q is not true or false", waiting))
		return
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := approvalList{Approvals: make([]*approval.Approval, len(list)), NextCursor: next}
	members := s.members(ctx, list...)
	for i, a := range list {
		out.Approvals[i] = s.presentWith(members, a)
	}
	s.writeJSON(w, r, http.StatusOK, out)
}

// decideRequest is the optional body of approve and reject.
type decideRequest struct {
	Comment string `json:"comment"`
}

// handleDecide is POST /v1/approvals/{id}/approve and /reject: the token's subject votes. The
// store applies the vote with one conditional write, so of racing votes exactly one outcome
// wins and the others get 409 with it.
func (s *Server) handleDecide(verdict approval.Verdict) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		// The token's check rides with the vote's first read (authenticateFirstTrip).
		ctx, p, err := s.authenticateFirstTrip(r.Context(), r)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		// A body that is not the optional {"comment"} is answered 400 (413 when too large)
		// before the vote is asked for, whoever sends it: nothing is read or written for it.
		req, err := readDecide(w, r)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		id := r.PathValue("id")
		v, err := s.svc.Vote(ctx, p, approval.DecideRequest{
			ApprovalID: id,
			Verdict:    verdict,
			Comment:    req.Comment,
			Cause:      s.cause(r),
		})
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		// The decision is committed and the answer not yet written: the point where a crash
		// loses the answer but not the decision, which the retry must then find.
		if err := s.failpoints.Inject("approval.after-commit"); err != nil {
			s.writeError(w, r, fmt.Errorf("decide approval %s: %w", id, err))
			return
		}
		if !v.AlreadyVoted {
			s.writeJSON(w, r, http.StatusOK, s.present(r.Context(), v.Approval))
			return
		}
		answer := repeatedVote{Approval: s.present(r.Context(), v.Approval), AlreadyVoted: true,
			Notice: fmt.Sprintf("%s already voted %s; nothing changed", p.Subject, verdict)}
		if v.CommentIgnored {
			answer.Notice += "; the first vote's comment stands and this comment was not recorded"
		}
		s.writeJSON(w, r, http.StatusOK, answer)
	}
}

// readDecide reads the optional body of approve and reject.
func readDecide(w http.ResponseWriter, r *http.Request) (decideRequest, error) {
	var req decideRequest
	body, err := readBody(w, r)
	if err != nil {
		return req, err
	}
	if len(bytes.TrimSpace(body)) > 0 {
		return req, decodeObject(body, &req)
	}
	return req, nil
}

// repeatedVote is the answer to a vote the approver had already cast: the approval, in the
// contract's shape, with the fields that say so beside its own.
type repeatedVote struct {
	*approval.Approval
	AlreadyVoted bool   `json:"already_voted"`
	Notice       string `json:"notice"`
}

// handleCancelApproval is POST /v1/approvals/{id}/cancel: Service.Cancel decides who may.
func (s *Server) handleCancelApproval(w http.ResponseWriter, r *http.Request) {
	p, err := s.authenticate(r.Context(), r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	a, err := s.svc.Cancel(r.Context(), p, r.PathValue("id"), s.cause(r))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, s.present(r.Context(), a))
}

// eventList is the answer of GET /v1/approvals/{id}/events.
type eventList struct {
	Events []approval.Event `json:"events"`
}

// handleApprovalEvents is GET /v1/approvals/{id}/events: the audit trail, oldest first.
func (s *Server) handleApprovalEvents(w http.ResponseWriter, r *http.Request) {
	p, err := s.authenticate(r.Context(), r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	events, err := s.svc.Events(r.Context(), p, r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, eventList{Events: presentEvents(events)})
}
