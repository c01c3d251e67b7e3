package web

import (
	"errors"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/approvald/approval"
)

// Form limits (docs/security.md, "Memory under hostile load"). A form post is read only
// within its limit, and its Content-Length is checked against it before a byte is read.
const (
	// maxSigninFormBody bounds a sign-in form, posted by someone not yet known: a pasted API
	// token, a name or an e-mail address, an e-mailed link's token, the form token and next.
	maxSigninFormBody = 4 << 10
	// maxFormBody bounds the forms of a signed-in viewer. The largest is a decision with its
	// comment of up to approval.MaxCommentLength characters, each up to 4 bytes of UTF-8 and
	// up to 3 characters per byte once form-encoded, beside a few short fields.
	maxFormBody = approval.MaxCommentLength*4*3 + 4<<10
)

// BodyBudget is the budget of request bodies read before their sender is known, shared with
// the rest of the process (httpapi.BodyBudget): Reserve takes n bytes at once or reports
// false, and release gives them back.
type BodyBudget interface {
	Reserve(n int64) (release func(), ok bool)
}

// formLimit is the limit of a form posted to path, and whether it is a sign-in form, posted
// by someone not yet known.
func formLimit(path string) (limit int64, signin bool) {
	if strings.HasPrefix(path, Prefix+"signin/") {
		return maxSigninFormBody, true
	}
	return maxFormBody, false
}

// readForm parses a form post within its limit, after the checks that cost nothing: a body
// must be sent form-encoded (EINVALID), and must not declare more than the limit
// (ETOOLARGE). A sign-in form's bytes are reserved from the budget while it is read
// (EUNAVAILABLE, with Retry-After, when there is no room). A body that turns out larger than
// the limit is ETOOLARGE. On a refusal the connection is closed after the answer, so that
// net/http does not read the rest of the body either.
func (s *Server) readForm(w http.ResponseWriter, r *http.Request) error {
	limit, signin := formLimit(r.URL.Path)
	return s.readFormWithin(w, r, limit, signin)
}

// readFormWithin is readForm of a form of at most limit bytes, whose bytes are reserved from
// the budget when unknown is true: its sender is not known (a sign-in form, or a vote whose
// session was refused).
func (s *Server) readFormWithin(w http.ResponseWriter, r *http.Request, limit int64, unknown bool) error {
	if err := checkFormType(r); err != nil {
		w.Header().Set("Connection", "close")
		return err
	}
	tooLarge := approval.Errorf(approval.ETOOLARGE, "the form is larger than %d KiB", limit>>10)
	if r.ContentLength > limit {
		w.Header().Set("Connection", "close")
		return tooLarge
	}
	if s.bodies != nil && unknown {
		size := limit
		if r.ContentLength >= 0 {
			size = r.ContentLength
		}
		release, ok := s.bodies.Reserve(size)
		if !ok {
			w.Header().Set("Connection", "close")
			return &approval.Error{
				Code:       approval.EUNAVAILABLE,
				Message:    "the server is reading as many forms as it accepts at once; retry later",
				RetryAfter: time.Second,
			}
		}
		defer release()
	}
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	if err := r.ParseForm(); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return tooLarge
		}
		return approval.Errorf(approval.EINVALID, "the form could not be read")
	}
	return nil
}

// checkFormType refuses a post whose body is not form-encoded, as the pages' forms send it.
func checkFormType(r *http.Request) error {
	if r.ContentLength == 0 {
		return nil
	}
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/x-www-form-urlencoded" {
		return approval.Errorf(approval.EINVALID, "the form must be sent as application/x-www-form-urlencoded")
	}
	return nil
}
