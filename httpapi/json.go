package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"reflect"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/approvald/approval"
)

// maxBodyBytes bounds every JSON request body.
const maxBodyBytes = 64 << 10

// readBody reads the whole request body: at most maxBodyBytes (ETOOLARGE beyond, without
// reading the rest), valid UTF-8, and, unless it is empty, sent as JSON (checkMediaType).
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return nil, approval.Errorf(approval.ETOOLARGE, "body is larger than %d KiB", maxBodyBytes>>10)
	} else if err != nil {
		return nil, approval.Errorf(approval.EINVALID, "body could not be read: %v", err)
	}
	if len(body) > 0 {
		if err := checkMediaType(r.Header.Values("Content-Type")); err != nil {
			return nil, err
		}
	}
	if !utf8.Valid(body) {
		return nil, approval.Errorf(approval.EINVALID, "body is not valid UTF-8")
	}
	return body, nil
}

// errMediaType is the code of a 415: a body that is not sent as JSON. Like errMethod, it is
// an HTTP matter.
const errMediaType = "unsupported_media_type"

// checkMediaType refuses a body whose Content-Type is not JSON: application/json or
// application/*+json, with no parameter but charset=utf-8. A form or text body that happens
// to parse as JSON is refused, so that what a client meant is never guessed.
func checkMediaType(values []string) error {
	const want = "send the body as Content-Type: application/json"
	if len(values) != 1 {
		return approval.Errorf(errMediaType, "the request has %d Content-Type headers; %s", len(values), want)
	}
	mt, params, err := mime.ParseMediaType(values[0])
	if err != nil {
		return approval.Errorf(errMediaType, "Content-Type %q cannot be parsed; %s", values[0], want)
	}
	sub, ok := strings.CutPrefix(mt, "application/")
	if !ok || (sub != "json" && !strings.HasSuffix(sub, "+json")) {
		return approval.Errorf(errMediaType, "Content-Type %s is not JSON; %s", mt, want)
	}
	for name, value := range params {
		if name != "charset" || !strings.EqualFold(value, "utf-8") {
			return approval.Errorf(errMediaType, "Content-Type parameter %s=%s is not accepted; JSON is UTF-8 (charset=utf-8 may be given)", name, value)
		}
	}
	return nil
}

// decodeObject decodes body, which must be exactly one JSON object, into the struct v. Unknown
// fields are refused so that a misspelt optional field is not silently ignored.
func decodeObject(body []byte, v any) error {
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) == 0 {
		return approval.Errorf(approval.EINVALID, "body is empty; send a JSON object")
	} else if trimmed[0] != '{' {
		return approval.Errorf(approval.EINVALID, "body must be a JSON object")
	}
	// Duplicate keys, unpaired surrogates, NULs and out-of-range numbers, at every depth; a
	// body that is not valid JSON is explained by the decoder below, which says where.
	if err := approval.CheckJSON("body", body); err != nil && json.Valid(body) {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err, v)
	}
	if _, err := dec.Token(); err != io.EOF {
		return approval.Errorf(approval.EINVALID, "body has data after the JSON object")
	}
	return nil
}

// decodeError turns an encoding/json error into a message that names the field and the rule.
func decodeError(err error, v any) error {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		return approval.Errorf(approval.EINVALID, "body is not valid JSON: %v (at byte %d)", syntax, syntax.Offset)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return approval.Errorf(approval.EINVALID, "body is truncated JSON")
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			field = "body"
		}
		return approval.Errorf(approval.EINVALID, "%s must be %s, not %s", field, describeType(typ.Type), typ.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		// encoding/json has no typed error for this one.
		name := strings.TrimPrefix(err.Error(), "json: unknown field ")
		return approval.Errorf(approval.EINVALID, "unknown field %s; the fields are %s", name, strings.Join(jsonFields(v), ", "))
	}
	return approval.Errorf(approval.EINVALID, "body is not valid JSON: %v", err)
}

// describeType names a Go type the way an API user thinks of its JSON.
func describeType(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "an integer"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice:
		return "an array of " + strings.TrimPrefix(strings.TrimPrefix(describeType(t.Elem()), "a "), "an ") + "s"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Pointer:
		return describeType(t.Elem())
	}
	return t.String()
}

// jsonFields lists the JSON names of the struct v points to.
func jsonFields(v any) []string {
	t := reflect.TypeOf(v)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var names []string
	for i := 0; i < t.NumField(); i++ {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
			names = append(names, name)
		}
	}
	return names
}

// marshal encodes a response body, ending it with a newline for people reading it with curl.
func marshal(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode response: %w", err)
	}
	return append(b, '\n'), nil
}

// writeJSON answers v as JSON with the status code.
func (s *Server) writeJSON(w http.ResponseWriter, r *http.Request, status int, v any) {
	if err := s.settle(r); err != nil {
		s.writeError(w, r, err)
		return
	}
	body, err := marshal(v)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if _, err := w.Write(body); err != nil {
		s.info(r).log.Debug("write response", slog.Any("error", err))
	}
}

// present returns a copy of a in the shape of the API: times in UTC, empty lists and context
// as [] and {} rather than null, and for an approval created under a policy its progress by
// the groups as they are now (docs/http-api.md, "The approval").
func (s *Server) present(ctx context.Context, a *approval.Approval) *approval.Approval {
	return s.presentWith(s.members(ctx, a), a)
}

// members returns the groups' members now, as the progress of the approvals is counted by
// (Service.ProgressMembers). A failed read is logged and the progress shown by the
// configured members: the answer is the approval's, and its status is the store's.
func (s *Server) members(ctx context.Context, as ...*approval.Approval) approval.Members {
	m, err := s.svc.ProgressMembers(ctx, as...)
	if err != nil {
		s.log.Warn("read the members of the identity provider's groups", slog.Any("error", err))
		return s.svc.Members
	}
	return m
}

// presentWith is present with the groups' members given.
func (s *Server) presentWith(members approval.Members, a *approval.Approval) *approval.Approval {
	c := *a
	c.Policy = a.PolicyStatus(members)
	if c.Approvers == nil {
		c.Approvers = []string{}
	}
	if len(c.Context) == 0 {
		c.Context = json.RawMessage("{}")
	}
	c.Decisions = make([]approval.Decision, len(a.Decisions))
	for i, d := range a.Decisions {
		d.At = d.At.UTC()
		c.Decisions[i] = d
	}
	c.DecidedAt = utcPtr(a.DecidedAt)
	c.ExpiresAt = a.ExpiresAt.UTC()
	c.CreatedAt = a.CreatedAt.UTC()
	if a.Execution != nil {
		e := *a.Execution
		e.Result = jsonResult(e.Result)
		e.UpdatedAt = utcPtr(e.UpdatedAt)
		c.Execution = &e
	}
	return &c
}

// jsonResult returns an execution result that can be embedded in an answer: the stored JSON
// as it is, or, when a target answered something that is not JSON, that text as a JSON
// string, so that one odd downstream body cannot make the approval unreadable.
func jsonResult(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 || json.Valid(raw) {
		return raw
	}
	text, _ := json.Marshal(string(raw)) // a string always encodes; invalid UTF-8 becomes U+FFFD
	return text
}

// presentEvents returns events in the shape of the API: [] rather than null, times in UTC.
func presentEvents(events []approval.Event) []approval.Event {
	out := make([]approval.Event, len(events))
	for i, e := range events {
		e.At = e.At.UTC()
		out[i] = e
	}
	return out
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}
