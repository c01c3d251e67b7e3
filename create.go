package approval

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// CreateRequest is the body of a create (POST /v1/approvals). Optional fields are pointers or
// raw JSON so that an absent field can be told apart from a zero value.
type CreateRequest struct {
	Action            string          `json:"action"`
	Title             string          `json:"title"`
	Context           json.RawMessage `json:"context,omitempty"`
	Approvers         []string        `json:"approvers"`
	RequiredApprovals *int            `json:"required_approvals,omitempty"`
	ExpiresIn         *string         `json:"expires_in,omitempty"`
	// CallbackURL, when set, receives the approval's decision, expiry or cancellation instead
	// of the requester's configured callback; it must pass Routing.CheckCallbackURL.
	CallbackURL *string `json:"callback_url,omitempty"`
}

// Limits of a create request.
const (
	MaxActionLength  = 100 // characters
	MaxTitleLength   = 200 // characters
	MaxApprovers     = 50
	MaxContextDepth  = 32 // nesting levels, the context object itself being the first
	DefaultExpiresIn = 24 * time.Hour
	MaxExpiresIn     = 90 * 24 * time.Hour
	DefaultRequired  = 1
	MaxCallbackURL   = 2048 // bytes
)

// NewApproval validates req and returns the pending approval it asks for, made by requester
// under the operation key with the request's fingerprint, created at now. Every violation is an
// EINVALID error whose message names the field and the rule. A JSON null in an optional field
// counts as absent. The requester and the approvers are people's names: stored normalised
// (NormalizeName), refused when they could pass for someone else, and distinct once
// normalised.
func NewApproval(req CreateRequest, requester, key, fingerprint string, now time.Time) (*Approval, error) {
	return newApproval(req, requester, key, fingerprint, now, nil)
}

// newApproval is NewApproval under the policy resolve returns for the normalised requester,
// with the people its stages name by themselves, asked once the action, title, requester and
// key are valid; a nil resolve, or a decision FromRequest, leaves the approvers to the
// request. Under a policy the approval keeps the Resolved rules, its approvers are those
// people (decide asks the groups again at each vote), its required approvals the total of
// the rules', and its expiry the policy's unless the request names a shorter one.
func newApproval(req CreateRequest, requester, key, fingerprint string, now time.Time, resolve func(requester string) (*PolicyDecision, []string, error)) (*Approval, error) {
	if err := CheckName("action", req.Action, MaxActionLength); err != nil {
		return nil, err
	}
	if err := CheckName("title", req.Title, MaxTitleLength); err != nil {
		return nil, err
	}
	requester, err := NormalizeName("requester (the token's subject)", requester)
	if err != nil {
		return nil, err
	}
	if err := CheckName("operation key", key, MaxOperationKeyLength); err != nil {
		return nil, err
	}

	var (
		under     *PolicyDecision
		approvers []string
		required  int
		resolved  *Resolved
		expiresIn = DefaultExpiresIn
	)
	if resolve != nil {
		d, named, err := resolve(requester)
		if err != nil {
			return nil, err
		}
		if !d.FromRequest {
			under, approvers = d, named
		}
	}
	if under != nil {
		// Whatever the request says of its approvers was refused by the policies already,
		// except required_approvals, which only the rules decide.
		if req.RequiredApprovals != nil {
			return nil, Errorf(EUNPROCESSABLE, "policy %s decides how many approvals %s needs; remove required_approvals from the request", under.Resolved.Policy, req.Action)
		}
		r := under.Resolved
		resolved = &r
		required = requiredOf(r.Stages)
		if under.ExpiresIn > 0 {
			expiresIn = min(under.ExpiresIn, MaxExpiresIn)
		}
	} else if approvers, required, err = requestApprovers(req, requester); err != nil {
		return nil, err
	}

	if req.ExpiresIn != nil {
		d, err := time.ParseDuration(*req.ExpiresIn)
		if err != nil {
			return nil, Errorf(EINVALID, "expires_in %q is not a duration such as \"24h\" or \"90m\"", *req.ExpiresIn)
		}
		if d <= 0 || d > MaxExpiresIn {
			return nil, Errorf(EINVALID, "expires_in %s is out of range; it must be more than 0 and at most %s (90 days)", d, MaxExpiresIn)
		}
		if under != nil && d > expiresIn {
			return nil, Errorf(EUNPROCESSABLE, "expires_in %s is longer than policy %s allows (%s); name a shorter one or none", d, under.Resolved.Policy, expiresIn)
		}
		expiresIn = d
	}

	ctx, err := normalizeContext(req.Context)
	if err != nil {
		return nil, err
	}

	callback := ""
	if req.CallbackURL != nil {
		callback = *req.CallbackURL
		if err := CheckName("callback_url", callback, MaxCallbackURL); err != nil {
			return nil, err
		}
	}

	now = now.UTC().Truncate(Precision)
	return &Approval{
		ID:                NewID("apr"),
		OperationKey:      key,
		Action:            req.Action,
		Title:             req.Title,
		Context:           ctx,
		Requester:         requester,
		Approvers:         approvers,
		RequiredApprovals: required,
		Status:            StatusPending,
		Decisions:         []Decision{},
		ExpiresAt:         now.Add(expiresIn).Truncate(Precision),
		CreatedAt:         now,
		Version:           1,
		Fingerprint:       fingerprint,
		CallbackURL:       callback,
		Resolved:          resolved,
	}, nil
}

// requestApprovers are the approvers and required approvals a request names, checked: the
// names distinct once normalised, and enough of them besides the requester.
func requestApprovers(req CreateRequest, requester string) ([]string, int, error) {
	if len(req.Approvers) == 0 {
		return nil, 0, Errorf(EINVALID, "approvers is required: list 1 to %d approver names", MaxApprovers)
	} else if len(req.Approvers) > MaxApprovers {
		return nil, 0, Errorf(EINVALID, "approvers has %d names; at most %d are allowed", len(req.Approvers), MaxApprovers)
	}
	approvers := make([]string, len(req.Approvers))
	seen := make(map[string]bool, len(req.Approvers))
	for i, name := range req.Approvers {
		if strings.TrimSpace(name) == "" {
			return nil, 0, Errorf(EINVALID, "approvers[%d] is empty; each approver must be a name", i)
		}
		n, err := NormalizeName(fmt.Sprintf("approvers[%d]", i), name)
		if err != nil {
			return nil, 0, err
		} else if seen[n] {
			return nil, 0, Errorf(EINVALID, "approvers[%d] %q is listed twice (as %q once normalised); approvers must be distinct", i, name, n)
		}
		seen[n] = true
		approvers[i] = n
	}

	required := DefaultRequired
	if req.RequiredApprovals != nil {
		required = *req.RequiredApprovals
	}
	if required < 1 || required > len(req.Approvers) {
		return nil, 0, Errorf(EINVALID, "required_approvals is %d; it must be between 1 and the number of approvers (%d)", required, len(req.Approvers))
	}
	// The requester may not approve their own request (Decide), so a request that needs more
	// approvals than the other approvers can give would wait for ever: refuse it now.
	eligible := len(req.Approvers)
	if seen[requester] {
		eligible--
	}
	switch {
	case eligible == 0:
		return nil, 0, Errorf(EINVALID, "approvers lists only the requester %q, who may not approve their own request; name someone else", requester)
	case required > eligible:
		return nil, 0, Errorf(EINVALID, "required_approvals is %d but only %d approvers may approve: the requester %q may not approve their own request", required, eligible, requester)
	}

	return approvers, required, nil
}

// normalizeContext returns the context as compact JSON: {} when absent or null, otherwise it
// must be a JSON object nested at most MaxContextDepth levels deep. The depth limit keeps
// hostile documents from costing stack and time in every later reader (stores, clients).
func normalizeContext(raw json.RawMessage) (json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return json.RawMessage("{}"), nil
	}
	if raw[0] != '{' {
		return nil, Errorf(EINVALID, "context must be a JSON object")
	}
	if err := CheckJSON("context", raw); err != nil { // also "context is not valid JSON"
		return nil, err
	}
	depth, spaced := jsonShape(raw)
	if depth > MaxContextDepth {
		return nil, Errorf(EINVALID, "context is nested %d levels deep; at most %d are allowed", depth, MaxContextDepth)
	}
	if spaced {
		var buf bytes.Buffer
		if err := json.Compact(&buf, raw); err != nil {
			return nil, Errorf(EINVALID, "context is not valid JSON: %v", err)
		}
		raw = buf.Bytes()
	}
	if len(raw) > MaxContextBytes {
		return nil, Errorf(EINVALID, "context is %d bytes compacted; at most %d (64 KiB) are allowed", len(raw), MaxContextBytes)
	}
	return raw, nil
}

// jsonShape returns the deepest nesting of objects and arrays in a valid JSON document, and
// whether it has white space between its tokens (without, it is compact as it is).
func jsonShape(doc []byte) (deepest int, spaced bool) {
	depth := 0
	inString, escaped := false, false
	for _, c := range doc {
		switch {
		case inString && escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case inString && c == '"':
			inString = false
		case inString:
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
			deepest = max(deepest, depth)
		case c == '}' || c == ']':
			depth--
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			spaced = true
		}
	}
	return deepest, spaced
}
