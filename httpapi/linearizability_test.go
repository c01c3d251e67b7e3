package httpapi_test

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/testdb"
)

// TestLinearizable checks that the approval API is linearizable (docs/invariants.md, invariants 1 and 2)
// on both stores. Each round, clients released by one barrier send concurrent requests over
// real HTTP against a few operation keys: creates of one key with an identical body from
// several clients, approvals and rejections by different approvers of an approval that
// needs 2 of its 3 approvers (so the quorum matters, and any rejection is final), the
// requester's own approval (403), a stranger's vote (404), cancels and reads. Every request
// is recorded with the times it was sent and answered, and porcupine checks that the answers
// could all have come from one approval per key changing one request at a time, at some
// instant between each request's call and its return (lin model below).
func TestLinearizable(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{testdb.SQLite, testdb.Postgres} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			if kind == testdb.Postgres {
				testdb.PostgresURL(t)
			}
			f := setup(t, kind)
			tokens := map[string]string{
				linRequester: f.token(linRequester, approval.RoleAdmin),
				"alice":      f.token("alice", approval.RoleApprover),
				"bob":        f.token("bob", approval.RoleApprover),
				"carol":      f.token("carol", approval.RoleApprover),
			}
			const rounds, keysPerRound, clients, opsPerClient = 4, 5, 10, 15
			var history []porcupine.Operation
			start := time.Now()
			tally := map[string]int{}
			for round := range rounds {
				keys := make([]string, keysPerRound)
				for i := range keys {
					keys[i] = fmt.Sprintf("lin-%d-%d", round, i)
				}
				ops := linRound(f, tokens, start, keys, clients, opsPerClient, uint64(round))
				for _, op := range ops {
					out := op.Output.(linOutput)
					tally[fmt.Sprintf("%s %s", op.Input.(linInput).Kind, out.describe())]++
				}
				history = append(history, ops...)
			}
			t.Logf("%d operations on %d keys: %v", len(history), rounds*keysPerRound, tallyLine(tally))

			result, info := porcupine.CheckOperationsVerbose(linModel, history, time.Minute)
			if result == porcupine.Unknown {
				t.Fatalf("the history of %d operations could not be checked within a minute", len(history))
			}
			if result != porcupine.Ok {
				path := filepath.Join(t.ArtifactDir(), "linearizability.html")
				if err := porcupine.VisualizePath(linModel, info, path); err != nil {
					t.Errorf("visualize: %v", err)
				}
				t.Fatalf("the history is not linearizable (%s); see %s (kept with go test -artifacts)%s", result, path, illegalKeys(history))
			}
		})
	}
}

// TestLinearizableModel: the model accepts a history that is linearizable and rejects ones
// that are not, so TestLinearizable can fail.
func TestLinearizableModel(t *testing.T) {
	t.Parallel()
	const key = "k"
	op := func(client int, call, ret int64, kind, who string, out linOutput) porcupine.Operation {
		return porcupine.Operation{ClientId: client, Input: linInput{Key: key, Kind: kind, Who: who}, Call: call, Output: out, Return: ret}
	}
	created := linOutput{Code: 201, ID: "apr_1", Status: "pending", Version: 1}
	pending := linOutput{Code: 200, ID: "apr_1", Status: "pending", Version: 2, Votes: "alice=approve"}
	approved := linOutput{Code: 200, ID: "apr_1", Status: "approved", Version: 3, Votes: "alice=approve,bob=approve"}
	base := []porcupine.Operation{
		op(0, 0, 10, linCreate, linRequester, created),
		op(1, 5, 12, linCreate, linRequester, created), // a concurrent create of the same key
		op(0, 11, 20, linApprove, "alice", pending),
		op(1, 21, 40, linApprove, "bob", approved), // the quorum vote
		op(2, 25, 28, linRead, "", approved),       // sees it before the vote returned
	}
	tests := []struct {
		name  string
		extra []porcupine.Operation
		want  bool
	}{
		{"a read sees the quorum vote while it is in flight", nil, true},
		{"a read concurrent with that read still sees pending", []porcupine.Operation{op(3, 22, 27, linRead, "", pending)}, true},
		{"a read after it sees pending again", []porcupine.Operation{op(3, 29, 35, linRead, "", pending)}, false},
		{"two creates of one key answer two ids", []porcupine.Operation{op(3, 1, 3, linCreate, linRequester, linOutput{Code: 201, ID: "apr_2", Status: "pending", Version: 1})}, false},
		{"a reject after the approval is accepted", []porcupine.Operation{op(3, 41, 45, linReject, "root", linOutput{Code: 200, ID: "apr_1", Status: "rejected", Version: 4})}, false},
		{"a reject after the approval conflicts with it", []porcupine.Operation{op(3, 41, 45, linReject, "root", linOutput{Code: 409, ID: "apr_1", Status: "approved", Version: 3, Votes: "alice=approve,bob=approve"})}, true},
		{"the requester approves their own", []porcupine.Operation{op(3, 41, 45, linApprove, linRequester, approved)}, false},
		{"the requester's own approval refused", []porcupine.Operation{op(3, 41, 45, linApprove, linRequester, linOutput{Code: 403})}, true},
		{"a stranger's vote counted", []porcupine.Operation{op(3, 13, 19, linApprove, "carol", linOutput{Code: 200, ID: "apr_1", Status: "approved", Version: 3, Votes: "alice=approve,carol=approve"})}, false},
		{"a cancel whose answer was lost may have counted", []porcupine.Operation{op(3, 41, math.MaxInt64, linCancel, linRequester, linOutput{Unknown: true})}, true},
		{"a cancel after the approval is accepted", []porcupine.Operation{op(3, 41, 45, linCancel, linRequester, linOutput{Code: 200, ID: "apr_1", Status: "cancelled", Version: 4, Votes: "alice=approve,bob=approve"})}, false},
	}
	for _, tt := range tests {
		history := append(slices.Clone(base), tt.extra...)
		if got := porcupine.CheckOperations(linModel, history); got != tt.want {
			t.Errorf("%s: linearizable %v, want %v", tt.name, got, tt.want)
		}
	}
}

// The operations of the model.
const (
	linCreate  = "create"
	linApprove = "approve"
	linReject  = "reject"
	linCancel  = "cancel"
	linRead    = "read"
)

// The approval every key names: requested by an admin who is also one of its three
// approvers, approved by any two of them.
const (
	linRequester = "root"
	linRequired  = 2
)

var linApprovers = []string{"alice", "bob", linRequester}

// linBody is the one create request of every key.
const linBody = `{"action": "deploy", "title": "Linearizability", "approvers": ["alice", "bob", "root"], "required_approvals": 2}`

// linInput is one request: Kind on the approval of Key, by Who.
type linInput struct {
	Key  string
	Kind string
	Who  string
}

// linOutput is what an answer says about the approval: its status code, and for a 200, 201
// or a 409 carrying the approval, its id, status, version and votes ("alice=approve,..."
// sorted by approver). Unknown is a request whose answer was lost: it may or may not have
// taken effect.
type linOutput struct {
	Unknown bool
	Code    int
	ID      string
	Status  string
	Version int64
	Votes   string
}

func (o linOutput) describe() string {
	switch {
	case o.Unknown:
		return "unknown"
	case o.ID == "":
		return fmt.Sprint(o.Code)
	}
	return fmt.Sprintf("%d %s", o.Code, o.Status)
}

// linState is the approval of one key as the sequential model has it.
type linState struct {
	Exists  bool
	ID      string
	Status  approval.Status
	Votes   string // as in linOutput
	Version int64
}

// linModel is the sequential specification of one approval per operation key, by the rules of
// docs/http-api.md and approval.Service's Decide and Cancel. It is nondeterministic only
// for answers that were lost, which may or may not have taken effect.
var linModel = (&porcupine.NondeterministicModel{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(linInput).Key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() []any { return []any{linState{}} },
	Step: func(state, input, output any) []any {
		s, in, out := state.(linState), input.(linInput), output.(linOutput)
		code, next := linStep(s, in, out)
		if out.Unknown {
			if code == 0 {
				return nil
			}
			return []any{s, next} // it took effect, or it never arrived
		}
		if code != out.Code {
			return nil
		}
		switch {
		case in.Kind == linCreate:
			// A create's answer, first or replayed, is the approval as it was made.
			if out.ID != next.ID || out.Status != string(approval.StatusPending) || out.Version != 1 || out.Votes != "" {
				return nil
			}
		case code == http.StatusOK || code == http.StatusConflict:
			// The approval after the request: changed by it, or, refused, as it stands.
			if out.ID != next.ID || out.Status != string(next.Status) || out.Version != next.Version || out.Votes != next.Votes {
				return nil
			}
		}
		return []any{next}
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(linInput), output.(linOutput)
		op := strings.TrimSpace(in.Who + " " + in.Kind)
		switch {
		case out.Unknown:
			return op + " -> lost"
		case out.ID == "":
			return fmt.Sprintf("%s -> %d", op, out.Code)
		}
		return fmt.Sprintf("%s -> %d %s v%d {%s}", op, out.Code, out.Status, out.Version, out.Votes)
	},
	DescribeState: func(state any) string {
		s := state.(linState)
		if !s.Exists {
			return "none"
		}
		return fmt.Sprintf("%s v%d {%s}", s.Status, s.Version, s.Votes)
	},
}).ToModel()

// linStep is the sequential rule: the status code a request gets in state s and the state
// after it. A request that cannot happen in s (a vote before the create) gets code 0. For a
// create, out supplies the id the approval gets.
func linStep(s linState, in linInput, out linOutput) (int, linState) {
	if in.Kind == linCreate {
		if s.Exists {
			return http.StatusCreated, s
		}
		if out.Unknown {
			return http.StatusCreated, s // as if it never arrived: the next create's answer tells the id
		}
		return http.StatusCreated, linState{Exists: true, ID: out.ID, Status: approval.StatusPending, Version: 1}
	}
	if !s.Exists {
		return 0, s
	}
	switch in.Kind {
	case linRead:
		return http.StatusOK, s
	case linCancel:
		if s.Status.Terminal() {
			return http.StatusConflict, s
		}
		s.Status, s.Version = approval.StatusCancelled, s.Version+1
		return http.StatusOK, s
	}
	verdict := approval.Verdict(in.Kind)
	votes := parseVotes(s.Votes)
	switch prev, voted := votes[in.Who]; {
	case !slices.Contains(linApprovers, in.Who):
		return http.StatusNotFound, s // a stranger may not see the approval
	case in.Who == linRequester && verdict == approval.VerdictApprove:
		return http.StatusForbidden, s
	case voted && prev == verdict:
		return http.StatusOK, s // a repeat changes nothing
	case voted, s.Status.Terminal():
		return http.StatusConflict, s
	}
	votes[in.Who] = verdict
	s.Votes, s.Version = formatVotes(votes), s.Version+1
	approvals := 0
	for _, v := range votes {
		if v == approval.VerdictApprove {
			approvals++
		}
	}
	switch {
	case verdict == approval.VerdictReject:
		s.Status = approval.StatusRejected
	case approvals >= linRequired:
		s.Status = approval.StatusApproved
	}
	return http.StatusOK, s
}

func parseVotes(s string) map[string]approval.Verdict {
	votes := map[string]approval.Verdict{}
	for _, v := range strings.Split(s, ",") {
		if who, verdict, ok := strings.Cut(v, "="); ok {
			votes[who] = approval.Verdict(verdict)
		}
	}
	return votes
}

func formatVotes(votes map[string]approval.Verdict) string {
	parts := make([]string, 0, len(votes))
	for who, v := range votes {
		parts = append(parts, who+"="+string(v))
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

// linRound runs one round: clients released together, each sending opsPerClient requests
// on keys chosen at random among three of the round's (so each key has several clients, and
// creates are not most of the requests; a client's first request on a key is the create that
// tells it the id), and returns the history, timed from start.
func linRound(f *fixture, tokens map[string]string, start time.Time, keys []string, clients, opsPerClient int, seed uint64) []porcupine.Operation {
	f.tb.Helper()
	histories := make([][]porcupine.Operation, clients)
	failures := make([]error, clients)
	race(clients, func(client int) {
		rnd := rand.New(rand.NewPCG(seed, uint64(client)))
		ids := map[string]string{}
		mine := min(3, len(keys))
		for range opsPerClient {
			key := keys[(client+rnd.IntN(mine))%len(keys)]
			in := linInput{Key: key, Kind: linCreate, Who: linRequester}
			if _, ok := ids[key]; ok && rnd.IntN(20) != 0 {
				in = linChoose(rnd, key)
			}
			call := time.Since(start).Nanoseconds()
			out, lost, err := linSend(f, tokens, ids[key], in)
			ret := time.Since(start).Nanoseconds()
			switch {
			case err != nil:
				failures[client] = fmt.Errorf("%s %s on %s: %w", in.Who, in.Kind, key, err)
				return
			case lost && in.Kind == linRead:
				continue // a read that got no answer says nothing
			case lost:
				out, ret = linOutput{Unknown: true}, math.MaxInt64
			}
			if in.Kind == linCreate {
				ids[key] = out.ID
			}
			histories[client] = append(histories[client], porcupine.Operation{
				ClientId: client, Input: in, Call: call, Output: out, Return: ret,
			})
		}
	})
	for _, err := range failures {
		if err != nil {
			f.tb.Fatal(err)
		}
	}
	return slices.Concat(histories...)
}

// linChoose picks a request other than a create, weighted so that the quorum is reached by
// races between approvals more often than it is cut short by a rejection or a cancel.
func linChoose(rnd *rand.Rand, key string) linInput {
	switch n := rnd.IntN(100); {
	case n < 35:
		return linInput{Key: key, Kind: linRead}
	case n < 70:
		return linInput{Key: key, Kind: linApprove, Who: []string{"alice", "bob"}[rnd.IntN(2)]}
	case n < 78:
		return linInput{Key: key, Kind: linReject, Who: linApprovers[rnd.IntN(len(linApprovers))]}
	case n < 86:
		return linInput{Key: key, Kind: linApprove, Who: linRequester}
	case n < 93:
		return linInput{Key: key, Kind: []string{linApprove, linReject}[rnd.IntN(2)], Who: "carol"}
	}
	return linInput{Key: key, Kind: linCancel, Who: linRequester}
}

// linSend sends one request about the approval id and reads its answer. lost says the
// answer was lost in transport: the request may or may not have taken effect. A create is
// sent again until it is answered for good, as a client does after a lost answer or a 409
// with Retry-After (the key in flight): the history has it as one request from the first
// call to the last answer. An answer no request should get (a 5xx, a body that does not
// decode) is an error.
func linSend(f *fixture, tokens map[string]string, id string, in linInput) (out linOutput, lost bool, err error) {
	var resp *response
	switch in.Kind {
	case linCreate:
		for tries := 0; ; tries++ {
			resp, err = f.send("POST", "/v1/approvals", tokens[in.Who], linBody, "Idempotency-Key", in.Key)
			retry := err != nil || (resp.status == http.StatusConflict && resp.header.Get("Retry-After") != "")
			if !retry {
				break
			} else if tries == 5000 {
				return linOutput{}, false, fmt.Errorf("still not created after %d tries: %v", tries, err)
			}
			time.Sleep(time.Millisecond)
		}
	case linRead:
		resp, err = f.send("GET", "/v1/approvals/"+id, tokens[linRequester], "")
	case linCancel:
		resp, err = f.send("POST", "/v1/approvals/"+id+"/cancel", tokens[in.Who], "")
	default:
		resp, err = f.send("POST", "/v1/approvals/"+id+"/"+in.Kind, tokens[in.Who], "")
	}
	if err != nil {
		return linOutput{}, true, nil
	}
	out = linOutput{Code: resp.status}
	var a *approval.Approval
	switch resp.status {
	case http.StatusOK, http.StatusCreated:
		a = &approval.Approval{}
		if err := json.Unmarshal(resp.body, a); err != nil {
			return linOutput{}, false, fmt.Errorf("decode %d %s: %v", resp.status, resp.body, err)
		}
	case http.StatusConflict:
		var p problemBody
		if err := json.Unmarshal(resp.body, &p); err != nil {
			return linOutput{}, false, fmt.Errorf("decode %d %s: %v", resp.status, resp.body, err)
		}
		a = p.Approval // nil for a 409 without the approval, which the model refuses
	case http.StatusForbidden, http.StatusNotFound:
	default:
		return linOutput{}, false, fmt.Errorf("got %d %s", resp.status, resp.body)
	}
	if a != nil {
		votes := map[string]approval.Verdict{}
		for _, d := range a.Decisions {
			votes[d.Approver] = d.Verdict
		}
		out.ID, out.Status, out.Version, out.Votes = a.ID, string(a.Status), a.Version, formatVotes(votes)
	}
	return out, false, nil
}

// illegalKeys describes the first key whose own history is not linearizable, with its
// requests in the order they were sent, for the failure message.
func illegalKeys(history []porcupine.Operation) string {
	var b strings.Builder
	for _, ops := range linModel.Partition(history) {
		if porcupine.CheckOperations(linModel, ops) {
			continue
		}
		ops = slices.Clone(ops)
		slices.SortFunc(ops, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
		fmt.Fprintf(&b, "\nkey %s is not linearizable:", ops[0].Input.(linInput).Key)
		for _, op := range ops {
			ret := "lost"
			if op.Return != math.MaxInt64 {
				ret = strconv.FormatInt(op.Return/1000, 10)
			}
			fmt.Fprintf(&b, "\n  client %2d  [%d, %s] µs  %s", op.ClientId, op.Call/1000, ret, linModel.DescribeOperation(op.Input, op.Output))
		}
		break
	}
	return b.String()
}

// tallyLine renders counts sorted by name.
func tallyLine(tally map[string]int) string {
	names := make([]string, 0, len(tally))
	for n := range tally {
		names = append(names, n)
	}
	slices.Sort(names)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s: %d", n, tally[n])
	}
	return strings.Join(parts, ", ")
}
