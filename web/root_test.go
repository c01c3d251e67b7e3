package web_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/approvald/approval/internal/testdb"
)

// rawGet sends one request without a body or a cookie to the fixture's server, with the
// given Accept, and does not follow a redirect.
func (f *fixture) rawGet(method, path, accept string) (*http.Response, string) {
	f.tb.Helper()
	req, _ := http.NewRequest(method, f.srv.URL+path, nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		f.tb.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// TestRoot: the root URL sends a browser to the pages and tells any other client where the
// API and its OpenAPI document are, under the pages' security headers.
func TestRoot(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		f := setup(t, kind)

		for _, method := range []string{http.MethodGet, http.MethodHead} {
			resp, _ := f.rawGet(method, "/", "text/html,application/xhtml+xml,*/*;q=0.8")
			if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/ui/" {
				t.Errorf("%s / as a browser: got %d to %q, want 303 to /ui/", method, resp.StatusCode, resp.Header.Get("Location"))
			}
			if got := resp.Header.Get("Content-Security-Policy"); !strings.Contains(got, "default-src 'self'") {
				t.Errorf("%s / as a browser: Content-Security-Policy = %q, want the pages' policy", method, got)
			}
		}

		for _, accept := range []string{"", "application/json", "*/*"} {
			resp, body := f.rawGet(http.MethodGet, "/", accept)
			if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("GET / with Accept %q: got %d %s, want 200 application/json", accept, resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			var got map[string]string
			if err := json.Unmarshal([]byte(body), &got); err != nil {
				t.Fatalf("GET / with Accept %q: %v in %s", accept, err, body)
			}
			for k, want := range map[string]string{"api": "/v1/", "openapi": "/v1/openapi.json", "pages": "/ui/"} {
				if got[k] != want {
					t.Errorf("GET / with Accept %q: got %s %q, want %q", accept, k, got[k], want)
				}
			}
			if got := resp.Header.Get("Vary"); got != "Accept" {
				t.Errorf("GET /: got Vary %q, want Accept", got)
			}
		}
		// The document the answer points to is there.
		if resp, _ := f.rawGet(http.MethodGet, "/v1/openapi.json", ""); resp.StatusCode != http.StatusOK {
			t.Errorf("GET /v1/openapi.json: got %d, want 200", resp.StatusCode)
		}
		// Only the root itself: other unknown paths stay the API's 404.
		if resp, _ := f.rawGet(http.MethodGet, "/nope", "text/html"); resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET /nope: got %d, want 404", resp.StatusCode)
		}
	})
}

// TestFavicon: /favicon.ico is the pages' SVG icon, and the pages link it.
func TestFavicon(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		f := setup(t, kind)
		resp, body := f.rawGet(http.MethodGet, "/favicon.ico", "")
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "image/svg+xml" || !strings.Contains(body, "<svg") {
			t.Fatalf("GET /favicon.ico: got %d %s %q, want 200 image/svg+xml with the icon", resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
		_, page := f.rawGet(http.MethodGet, "/ui/signin", "text/html")
		if !strings.Contains(page, `<link rel="icon" href="/ui/static/favicon.svg" type="image/svg+xml">`) {
			t.Errorf("the sign-in page does not link the icon:\n%s", page)
		}
	})
}
