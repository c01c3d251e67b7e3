package web

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"path"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/approvald/approval"
)

// layoutData is what every page's frame needs; Page is the page's own data.
type layoutData struct {
	Title    string
	Viewer   *session
	CSRF     string // the form token of the sign-out form and the operators' forms
	Operator bool
	Page     any
}

// parsePages parses each page template together with the layout.
func parsePages() (map[string]*template.Template, error) {
	return parseTemplates(templateFS)
}

func parseTemplates(fsys embed.FS) (map[string]*template.Template, error) {
	base, err := template.New("layout.html").Funcs(funcs).ParseFS(fsys, "templates/layout.html")
	if err != nil {
		return nil, err
	}
	names, err := fsys.ReadDir("templates")
	if err != nil {
		return nil, err
	}
	pages := make(map[string]*template.Template)
	for _, e := range names {
		if e.Name() == "layout.html" {
			continue
		}
		t, err := template.Must(base.Clone()).ParseFS(fsys, path.Join("templates", e.Name()))
		if err != nil {
			return nil, err
		}
		pages[strings.TrimSuffix(e.Name(), ".html")] = t
	}
	return pages, nil
}

// render writes page name inside the layout. It renders into a buffer first, so that a
// template failure is a clean 500 rather than half a page.
func (s *Server) render(w http.ResponseWriter, r *http.Request, status int, name string, sess *session, page any) {
	data := layoutData{Title: titleOf(name, page), Viewer: sess, Page: page}
	if sess != nil {
		data.CSRF = s.formToken(sess)
		data.Operator = sess.principal().MayOperate()
	}
	var buf bytes.Buffer
	if err := s.pages[name].ExecuteTemplate(&buf, "layout.html", data); err != nil {
		s.log.Error("render page", "page", name, "error", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

// titleOf is the document title of a page.
func titleOf(name string, page any) string {
	switch p := page.(type) {
	case *approvalPage:
		return p.A.Title
	case errorPage:
		return p.Title
	}
	return map[string]string{"waiting": "Waiting for me", "approvals": "All approvals", "operations": "Operations", "signin": "Sign in", "notrecorded": "Vote not recorded"}[name]
}

var funcs = template.FuncMap{
	"utc":       func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04 UTC") },
	"iso":       func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	"status":    approvalStatus,
	"exec":      execStatus,
	"inbox":     inboxStatus,
	"causeText": causeText,
	"detail":    detailPairs,
	"execItem": func(e *approval.ExecutionRecord, csrf string, titles map[string]string) executionItem {
		return executionItem{E: e, CSRF: csrf, Title: titles[e.ApprovalID]}
	},
	"inc": func(i int) int { return i + 1 },
	// pct is n of total in steps of 10, for the width classes of a progress meter (no inline
	// style: the CSP allows none).
	"pct": func(n, total int) int {
		if total <= 0 || n >= total {
			return 100
		}
		return n * 10 / total * 10
	},
	"initial": func(s string) string {
		for _, r := range s {
			return strings.ToUpper(string(r))
		}
		return "?"
	},
}

// executionItem is one execution on the operators' page with the form token of its forms
// and its approval's title.
type executionItem struct {
	E     *approval.ExecutionRecord
	CSRF  string
	Title string
}

// statusView is a status shown by word, icon and colour (the class).
type statusView struct {
	Word  string `json:"word"`
	Icon  string `json:"icon"`
	Class string `json:"class"`
}

func approvalStatus(s approval.Status) statusView {
	switch s {
	case approval.StatusPending:
		return statusView{"Pending", "◷", "pending"}
	case approval.StatusApproved:
		return statusView{"Approved", "✓", "good"}
	case approval.StatusRejected:
		return statusView{"Rejected", "✕", "bad"}
	case approval.StatusExpired:
		return statusView{"Expired", "⌛", "muted"}
	case approval.StatusCancelled:
		return statusView{"Cancelled", "⊘", "muted"}
	}
	return statusView{string(s), "?", "muted"}
}

func execStatus(s approval.ExecutionStatus) statusView {
	switch s {
	case approval.ExecutionQueued:
		return statusView{"Queued", "◷", "pending"}
	case approval.ExecutionRunning:
		return statusView{"Running", "↻", "pending"}
	case approval.ExecutionSucceeded:
		return statusView{"Succeeded", "✓", "good"}
	case approval.ExecutionFailed:
		return statusView{"Failed", "✕", "bad"}
	case approval.ExecutionNeedsReview:
		return statusView{"Needs review", "⚠", "warn"}
	case approval.ExecutionCancelled:
		return statusView{"Cancelled", "⊘", "muted"}
	case approval.ExecutionNotConfigured:
		return statusView{"Run by the caller", "→", "muted"}
	}
	return statusView{string(s), "?", "muted"}
}

func inboxStatus(s approval.InboxStatus) statusView {
	switch s {
	case approval.InboxPending:
		return statusView{"Pending", "◷", "pending"}
	case approval.InboxFailed:
		return statusView{"Failed", "✕", "bad"}
	case approval.InboxProcessed:
		return statusView{"Processed", "✓", "good"}
	}
	return statusView{string(s), "•", "muted"}
}

// timeLeft says how long until t, coarsely: "2d 3h left", "14m left", "expired".
func timeLeft(t, now time.Time) string {
	d := t.Sub(now)
	switch {
	case d <= 0:
		return "no time left"
	case d >= 48*time.Hour:
		return fmt.Sprintf("%dd %dh left", int(d.Hours())/24, int(d.Hours())%24)
	case d >= time.Hour:
		return fmt.Sprintf("%dh %dm left", int(d.Hours()), int(d.Minutes())%60)
	case d >= time.Minute:
		return fmt.Sprintf("%dm left", int(d.Minutes()))
	}
	return "less than a minute left"
}

// causeText says what made an event happen: which request, delivery, attempt or operator.
func causeText(c approval.Cause) string {
	switch c.Kind {
	case approval.CauseHTTP:
		return "request " + c.RequestID
	case approval.CauseInbox:
		return fmt.Sprintf("webhook delivery %s from %s", c.EventID, c.Source)
	case approval.CauseWorker:
		return fmt.Sprintf("execution attempt %d", c.Attempt)
	case approval.CauseOperator:
		if c.RequestID != "" {
			return fmt.Sprintf("operator %s, request %s", c.Operator, c.RequestID)
		}
		return "operator " + c.Operator
	case approval.CauseSweeper:
		return "the sweeper (expiry)"
	}
	return string(c.Kind)
}

// pair is one key and value of an event's detail.
type pair struct{ Key, Value string }

func detailPairs(d map[string]any) []pair {
	out := make([]pair, 0, len(d))
	for k, v := range d {
		s, ok := v.(string)
		if !ok {
			b, _ := json.Marshal(v)
			s = string(b)
		}
		if s == "" {
			continue
		}
		out = append(out, pair{k, s})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// node is a JSON value shown as a tree: an object's members and an array's items are its
// children, a scalar has Text. The template escapes every key and value.
type node struct {
	Key      string
	Kind     string // object, array, string, number, bool, null
	Text     string
	Children []node
}

// contextTree decodes an approval's context for display; text that is not JSON is shown as
// one string.
func contextTree(raw json.RawMessage) node {
	if len(bytes.TrimSpace(raw)) == 0 {
		return node{Kind: "object"}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return node{Kind: "string", Text: string(raw)}
	}
	return toNode("", v)
}

func toNode(key string, v any) node {
	n := node{Key: key}
	switch v := v.(type) {
	case map[string]any:
		n.Kind = "object"
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			n.Children = append(n.Children, toNode(k, v[k]))
		}
	case []any:
		n.Kind = "array"
		for i, item := range v {
			n.Children = append(n.Children, toNode(fmt.Sprint(i), item))
		}
	case string:
		n.Kind, n.Text = "string", v
	case json.Number:
		n.Kind, n.Text = "number", v.String()
	case bool:
		n.Kind, n.Text = "bool", fmt.Sprint(v)
	default:
		n.Kind, n.Text = "null", "null"
	}
	return n
}

// errorPage is the data of the error page.
type errorPage struct {
	Status    int
	Title     string
	Detail    string
	RequestID string
}
