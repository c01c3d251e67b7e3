package approval

import (
	"context"
	"encoding/json"
	"time"
)

// Policies decide who must approve what (docs/policies.md): the Service asks them at every
// create, before anything is written. Package policy implements it (policy.Set.ForService);
// this package does not import the language.
type Policies interface {
	// Resolve returns the policy that applies to in, or refuses the request: EUNPROCESSABLE
	// when no policy matches the action or the request names approvers a policy does not
	// take, EFORBIDDEN when the requester may not ask for it, EINVALID when a condition
	// cannot be evaluated on the request.
	Resolve(ctx context.Context, in PolicyInput) (*PolicyDecision, error)
}

// PolicyInput is what a create asks, as Policies resolve it.
type PolicyInput struct {
	Action    string
	Title     string
	Requester string          // normalised
	Context   json.RawMessage // a JSON object, or empty
	// Approvers are the approvers the request names, allowed only under FromRequest.
	Approvers []string
}

// PolicyDecision is the policy that applies to a create.
type PolicyDecision struct {
	// Resolved is what the approval keeps: the policy's name, version and stages (no stages
	// under FromRequest).
	Resolved Resolved
	// FromRequest: the request names its approvers and required approvals, as with no
	// policies; the approval keeps no policy.
	FromRequest bool
	// ExpiresIn, when positive, is the expiry of an approval whose request names none, and
	// the longest one a request may name.
	ExpiresIn time.Duration
}
