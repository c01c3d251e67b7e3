package web

import (
	"slices"
	"testing"

	"github.com/approvald/approval"
)

// TestOIDCGroupsClaim: the groups are the configured claim's list of strings, from the ID
// token or else from userinfo; absent is no groups; any other shape fails the sign-in.
func TestOIDCGroupsClaim(t *testing.T) {
	t.Parallel()
	c, err := newOIDCClient(OIDCConfig{Issuer: "https://idp.example", ClientID: "a", RedirectURL: "https://x/cb"})
	if err != nil {
		t.Fatal(err)
	}
	roles, err := newOIDCClient(OIDCConfig{Issuer: "https://idp.example", ClientID: "a", RedirectURL: "https://x/cb", GroupsClaim: "roles"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name        string
		c           *oidcClient
		claims, inf map[string]any
		want        []string
		fails       bool
	}{
		{"list", c, map[string]any{"groups": []any{"sre", "dba"}}, nil, []string{"sre", "dba"}, false},
		{"absent", c, map[string]any{"sub": "x"}, nil, nil, false},
		{"null", c, map[string]any{"groups": nil}, nil, nil, false},
		{"from userinfo", c, map[string]any{}, map[string]any{"groups": []any{"sre"}}, []string{"sre"}, false},
		{"the token's wins", c, map[string]any{"groups": []any{}}, map[string]any{"groups": []any{"sre"}}, []string{}, false},
		{"configured claim", roles, map[string]any{"groups": []any{"x"}, "roles": []any{"sre"}}, nil, []string{"sre"}, false},
		{"a string", c, map[string]any{"groups": "sre"}, nil, nil, true},
		{"a number in the list", c, map[string]any{"groups": []any{"sre", 1.0}}, nil, nil, true},
	} {
		got, err := tc.c.groups(tc.claims, tc.inf)
		switch {
		case tc.fails && approval.ErrorCode(err) != approval.EUNAUTHORIZED:
			t.Errorf("%s: got %v, want %s", tc.name, err, approval.EUNAUTHORIZED)
		case !tc.fails && (err != nil || !slices.Equal(got, tc.want)):
			t.Errorf("%s: got %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
}
