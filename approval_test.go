package approval_test

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/approvald/approval"
)

func TestFingerprint(t *testing.T) {
	base, err := approval.Fingerprint("ci-bot", "POST", "/v1/approvals", []byte(`{"a": 1, "b": [1, 2], "c": {"x": "y"}}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name                    string
		requester, method, path string
		body                    string
		same                    bool
	}{
		{"key order and white space", "ci-bot", "POST", "/v1/approvals", "{\n\"c\":{\"x\":\"y\"},\"b\":[1,2],\"a\":1}", true},
		{"another requester", "other", "POST", "/v1/approvals", `{"a": 1, "b": [1, 2], "c": {"x": "y"}}`, false},
		{"another path", "ci-bot", "POST", "/v1/other", `{"a": 1, "b": [1, 2], "c": {"x": "y"}}`, false},
		{"array order matters", "ci-bot", "POST", "/v1/approvals", `{"a": 1, "b": [2, 1], "c": {"x": "y"}}`, false},
		{"another value", "ci-bot", "POST", "/v1/approvals", `{"a": 2, "b": [1, 2], "c": {"x": "y"}}`, false},
		// Parts are length-prefixed: moving bytes between requester and path changes the print.
		{"shifted boundary", "ci-botP", "OST", "/v1/approvals", `{"a": 1, "b": [1, 2], "c": {"x": "y"}}`, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := approval.Fingerprint(tt.requester, tt.method, tt.path, []byte(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			if (got == base) != tt.same {
				t.Fatalf("got same=%v, want %v", got == base, tt.same)
			}
		})
	}
	for _, bad := range []string{"", "{", `{"a":1} {"b":2}`, "nope"} {
		if _, err := approval.Fingerprint("ci-bot", "POST", "/v1/approvals", []byte(bad)); approval.ErrorCode(err) != approval.EINVALID {
			t.Errorf("body %q: got %v, want EINVALID", bad, err)
		}
	}
}

func TestCanonicalJSON(t *testing.T) {
	got, err := approval.CanonicalJSON([]byte(` {"b": "<&>", "a": 1.50, "c": [true, null]} `))
	if err != nil {
		t.Fatal(err)
	}
	// Keys sorted, white space gone, HTML characters and number literals kept as sent.
	if want := `{"a":1.50,"b":"<&>","c":[true,null]}`; string(got) != want {
		t.Fatalf("got %s, want %s", got, want)
	}
}

func TestNewApproval(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 123456789, time.UTC)
	intp := func(n int) *int { return &n }
	strp := func(s string) *string { return &s }
	names := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = "approver-" + strings.Repeat("x", i%3) + string(rune('a'+i%26)) + string(rune('a'+i/26))
		}
		return out
	}
	deep := func(levels int) json.RawMessage {
		return json.RawMessage(strings.Repeat(`{"a":`, levels) + "1" + strings.Repeat("}", levels))
	}
	valid := func() approval.CreateRequest {
		return approval.CreateRequest{Action: "deploy", Title: "Deploy", Approvers: []string{"alice", "bob"}}
	}

	a, err := approval.NewApproval(valid(), "ci-bot", "deploy-1", "fp", now)
	if err != nil {
		t.Fatal(err)
	}
	if a.Status != approval.StatusPending || a.Version != 1 || a.RequiredApprovals != 1 || string(a.Context) != "{}" {
		t.Fatalf("defaults: got %+v", a)
	}
	if want := now.Truncate(time.Microsecond); !a.CreatedAt.Equal(want) || !a.ExpiresAt.Equal(want.Add(24*time.Hour)) {
		t.Fatalf("times: got created %v expires %v", a.CreatedAt, a.ExpiresAt)
	}

	for _, tt := range []struct {
		name   string
		change func(*approval.CreateRequest)
		want   string // "" = valid; else a part of the EINVALID message
	}{
		{"title of 200 characters", func(r *approval.CreateRequest) { r.Title = strings.Repeat("é", 200) }, ""},
		{"title of 201 characters", func(r *approval.CreateRequest) { r.Title = strings.Repeat("é", 201) }, "title has 201 characters"},
		{"blank title", func(r *approval.CreateRequest) { r.Title = "  " }, "title is blank"},
		{"invalid UTF-8 title", func(r *approval.CreateRequest) { r.Title = "\xff" }, "not valid UTF-8"},
		{"no action", func(r *approval.CreateRequest) { r.Action = "" }, "action is required"},
		{"50 approvers", func(r *approval.CreateRequest) { r.Approvers = names(50) }, ""},
		{"51 approvers", func(r *approval.CreateRequest) { r.Approvers = names(51) }, "at most 50"},
		{"duplicate approver", func(r *approval.CreateRequest) { r.Approvers = []string{"a", "a"} }, "listed twice"},
		{"empty approver", func(r *approval.CreateRequest) { r.Approvers = []string{"a", " "} }, "approvers[1] is empty"},
		{"NUL in the title", func(r *approval.CreateRequest) { r.Title = "a\x00b" }, "title contains a NUL character"},
		{"NUL in the action", func(r *approval.CreateRequest) { r.Action = "\x00" }, "action contains a NUL character"},
		{"NUL in an approver", func(r *approval.CreateRequest) { r.Approvers = []string{"a", "b\x00"} }, "approvers[1] contains a NUL character"},
		{"required 2 of 2", func(r *approval.CreateRequest) { r.RequiredApprovals = intp(2) }, ""},
		{"required 3 of 2", func(r *approval.CreateRequest) { r.RequiredApprovals = intp(3) }, "required_approvals is 3"},
		{"required 0", func(r *approval.CreateRequest) { r.RequiredApprovals = intp(0) }, "required_approvals is 0"},
		{"expires in 90 days", func(r *approval.CreateRequest) { r.ExpiresIn = strp("2160h") }, ""},
		{"expires in 90 days and a second", func(r *approval.CreateRequest) { r.ExpiresIn = strp("2160h1s") }, "out of range"},
		{"expires in 0", func(r *approval.CreateRequest) { r.ExpiresIn = strp("0s") }, "out of range"},
		{"expires in garbage", func(r *approval.CreateRequest) { r.ExpiresIn = strp("tomorrow") }, "not a duration"},
		{"context 32 deep", func(r *approval.CreateRequest) { r.Context = deep(32) }, ""},
		{"context 33 deep", func(r *approval.CreateRequest) { r.Context = deep(33) }, "nested 33 levels"},
		{"context brackets inside strings do not count", func(r *approval.CreateRequest) {
			r.Context = json.RawMessage(`{"s":"` + strings.Repeat("{[", 40) + `\"}"}`)
		}, ""},
		{"context array", func(r *approval.CreateRequest) { r.Context = json.RawMessage(`[1]`) }, "must be a JSON object"},
		{"context null", func(r *approval.CreateRequest) { r.Context = json.RawMessage(`null`) }, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req := valid()
			tt.change(&req)
			_, err := approval.NewApproval(req, "ci-bot", "k", "fp", now)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("got %v, want valid", err)
			case tt.want != "" && (approval.ErrorCode(err) != approval.EINVALID || !strings.Contains(approval.ErrorMessage(err), tt.want)):
				t.Fatalf("got %v, want EINVALID containing %q", err, tt.want)
			}
		})
	}
}

// TestNewApprovalCompactsContext checks that the context is stored compact: white space
// between tokens goes, white space inside strings stays, and a compact context is kept as
// it is.
func TestNewApprovalCompactsContext(t *testing.T) {
	for _, tt := range []struct{ context, want string }{
		{"{\n  \"a\": [1, 2],\t\"b\" : {\"c\": \"x y\\\" z\"}\r\n}", `{"a":[1,2],"b":{"c":"x y\" z"}}`},
		{` {"s":"  spaced  ","n":null} `, `{"s":"  spaced  ","n":null}`},
		{`{"z":1,"a":"{ [ ]}"}`, `{"z":1,"a":"{ [ ]}"}`},
	} {
		req := approval.CreateRequest{Action: "deploy", Title: "Deploy", Approvers: []string{"alice"}, Context: json.RawMessage(tt.context)}
		a, err := approval.NewApproval(req, "ci-bot", "deploy-1", "fp", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if string(a.Context) != tt.want {
			t.Errorf("context %q: stored %s, want %s", tt.context, a.Context, tt.want)
		}
	}
}

func TestExecutionJSON(t *testing.T) {
	b, err := json.Marshal(approval.Approval{Execution: &approval.Execution{Status: approval.ExecutionNotConfigured}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"execution":{"status":"not_configured"}`) {
		t.Fatalf("got %s, want the bare not_configured execution", b)
	}
}

// TestCursor: a cursor decodes to the position it was made from, and what EncodeCursor could
// not have made is InvalidCursor, for both stores alike.
func TestCursor(t *testing.T) {
	at := time.Date(2030, time.January, 2, 3, 4, 5, 123456000, time.UTC)
	gotAt, gotID, err := approval.DecodeCursor(approval.EncodeCursor(at, "apr_1"))
	if err != nil || !gotAt.Equal(at) || gotID != "apr_1" {
		t.Fatalf("round trip: got %v %q %v, want %v apr_1", gotAt, gotID, err, at)
	}
	b64 := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	for _, bad := range []string{
		"garbage!", b64("no-colon"), b64("123:"), b64("soon:apr_1"),
		b64("9223372036854775807:apr_1"), b64("-62135596800000001:apr_1"), b64("1:apr\x00"), b64("1:apr\xff"),
	} {
		_, _, err := approval.DecodeCursor(bad)
		if want := approval.InvalidCursor(); approval.ErrorCode(err) != want.Code || approval.ErrorMessage(err) != want.Message {
			t.Errorf("cursor %q: got %v, want %v", bad, err, want)
		}
	}
}
