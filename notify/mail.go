// Package notify delivers what approvald's outbox holds (docs/notifications.md): e-mail over
// SMTP, chat messages to Slack-compatible webhooks, and decision callbacks signed the Standard
// Webhooks way. Each is a worker.Sender; the outbox worker claims, retries and records.
package notify

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"net"
	"net/mail"
	"net/smtp"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	texttemplate "text/template"
	"time"

	"github.com/approvald/approval"
	"github.com/approvald/approval/web"
	"github.com/approvald/approval/worker"
)

// The STARTTLS modes of Mail.
const (
	StartTLSRequired      = "required"      // refuse to send over a server that does not offer it
	StartTLSOpportunistic = "opportunistic" // use it when offered
	StartTLSNone          = "none"          // never (a relay on loopback)
)

// Mail sends notifications and sign-in links by e-mail over SMTP.
type Mail struct {
	Host     string
	Port     int
	StartTLS string // StartTLSRequired (the default when empty), StartTLSOpportunistic or StartTLSNone
	Username string // AUTH PLAIN when set (net/smtp refuses it over plain text but to localhost)
	Password string
	From     string // the From address, "approvald <approvals@example.com>"
	// PublicURL is where the pages are served; links point below it.
	PublicURL string
	// Address returns a person's e-mail address, "" when they have none
	// (approval.Service.EmailAddress: the configured one, else the one their identity
	// provider verified). An error, such as a store that cannot be reached, is retried.
	Address func(ctx context.Context, person string) (string, error)
	// TLSConfig is used for STARTTLS (nil: the system roots, ServerName Host).
	TLSConfig *tls.Config
	// LocalName is sent in HELO/EHLO (default "localhost").
	LocalName string
}

// Send delivers m; see worker.Sender. A message to a person without an address, or one the
// server refuses for good (5xx), is a permanent failure.
func (ml *Mail) Send(ctx context.Context, m *approval.OutboxMessage) error {
	to := ""
	if ml.Address != nil {
		var err error
		if to, err = ml.Address(ctx, m.Recipient); err != nil {
			return fmt.Errorf("address of %s: %w", m.Recipient, err)
		}
	}
	if to == "" {
		return worker.Permanent(fmt.Errorf("%s has no e-mail address", m.Recipient))
	}
	msg, err := ml.Compose(m, to)
	if err != nil {
		return worker.Permanent(err)
	}
	from, err := mail.ParseAddress(ml.From)
	if err != nil {
		return worker.Permanent(fmt.Errorf("from address %q: %w", ml.From, err))
	}
	return ml.deliver(ctx, from.Address, to, msg)
}

// deliver runs one SMTP conversation.
func (ml *Mail) deliver(ctx context.Context, from, to string, msg []byte) error {
	addr := net.JoinHostPort(ml.Host, strconv.Itoa(ml.Port))
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", addr, err)
	}
	defer conn.Close()
	if d, ok := ctx.Deadline(); ok {
		conn.SetDeadline(d)
	}
	c, err := smtp.NewClient(conn, ml.Host)
	if err != nil {
		return fmt.Errorf("smtp greeting: %w", err)
	}
	defer c.Close()
	if err := c.Hello(cmpOr(ml.LocalName, "localhost")); err != nil {
		return smtpErr("EHLO", err)
	}
	mode := cmpOr(ml.StartTLS, StartTLSRequired)
	if ok, _ := c.Extension("STARTTLS"); ok && mode != StartTLSNone {
		cfg := ml.TLSConfig
		if cfg == nil {
			cfg = &tls.Config{ServerName: ml.Host}
		}
		if err := c.StartTLS(cfg); err != nil {
			return smtpErr("STARTTLS", err)
		}
	} else if mode == StartTLSRequired {
		return worker.Permanent(fmt.Errorf("the server %s does not offer STARTTLS, which smtp.starttls requires", addr))
	}
	if ml.Username != "" {
		if err := c.Auth(smtp.PlainAuth("", ml.Username, ml.Password, ml.Host)); err != nil {
			return smtpErr("AUTH", err)
		}
	}
	if err := c.Mail(from); err != nil {
		return smtpErr("MAIL FROM", err)
	}
	if err := c.Rcpt(to); err != nil {
		return smtpErr("RCPT TO", err)
	}
	w, err := c.Data()
	if err != nil {
		return smtpErr("DATA", err)
	}
	if _, err := w.Write(msg); err != nil {
		return smtpErr("DATA", err)
	}
	if err := w.Close(); err != nil { // the server's answer to the message: accepted or not
		return smtpErr("DATA", err)
	}
	c.Quit() // the message is accepted; a failed goodbye changes nothing
	return nil
}

// smtpErr names the command that failed; a 5xx answer is permanent.
func smtpErr(cmd string, err error) error {
	err = fmt.Errorf("smtp %s: %w", cmd, err)
	var te *textproto.Error
	if errors.As(err, &te) && te.Code >= 500 {
		return worker.Permanent(err)
	}
	return err
}

// MessageID is the Message-ID of an outbox message: made from its id, so every resend of
// one message carries the same one and a mail system or reader folds them.
func (ml *Mail) MessageID(m *approval.OutboxMessage) string {
	host := "approvald.invalid"
	if u, err := url.Parse(ml.PublicURL); err == nil && u.Hostname() != "" {
		host = u.Hostname()
	}
	return "<" + m.ID + "@" + host + ">"
}

// Compose renders m for to: a multipart/alternative message with a text and an HTML part,
// headers included. Everything in it comes from the message row, the Date too, so a resend
// is the same message byte for byte.
func (ml *Mail) Compose(m *approval.OutboxMessage, to string) ([]byte, error) {
	v, err := ml.view(m)
	if err != nil {
		return nil, err
	}
	var text, html bytes.Buffer
	if err := textMail.ExecuteTemplate(&text, v.Template, v); err != nil {
		return nil, fmt.Errorf("render text mail: %w", err)
	}
	if err := htmlMail.ExecuteTemplate(&html, v.Template, v); err != nil {
		return nil, fmt.Errorf("render html mail: %w", err)
	}

	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	// A boundary from the message id: the same on every resend.
	if err := mw.SetBoundary("approvald-" + strings.ReplaceAll(m.ID, "_", "-")); err != nil {
		return nil, err
	}
	header := func(k, v string) { fmt.Fprintf(&b, "%s: %s\r\n", k, v) }
	header("From", ml.From)
	header("To", to)
	header("Subject", mime.QEncoding.Encode("utf-8", v.Subject))
	header("Date", m.CreatedAt.Format(time.RFC1123Z))
	header("Message-ID", ml.MessageID(m))
	header("Auto-Submitted", "auto-generated")
	header("MIME-Version", "1.0")
	header("Content-Type", `multipart/alternative; boundary="`+mw.Boundary()+`"`)
	b.WriteString("\r\n")
	for _, part := range []struct {
		typ  string
		body []byte
	}{{"text/plain; charset=utf-8", text.Bytes()}, {"text/html; charset=utf-8", html.Bytes()}} {
		pw, err := mw.CreatePart(textproto.MIMEHeader{
			"Content-Type":              {part.typ},
			"Content-Transfer-Encoding": {"quoted-printable"},
		})
		if err != nil {
			return nil, err
		}
		qp := quotedprintable.NewWriter(pw)
		if _, err := qp.Write(part.body); err != nil {
			return nil, err
		}
		if err := qp.Close(); err != nil {
			return nil, err
		}
	}
	if err := mw.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// mailView is what the templates show.
type mailView struct {
	Template string
	Subject  string
	Notice   approval.Notice
	Link     string    // the approval's page, or the sign-in link
	Expires  time.Time // when a sign-in link stops working
}

// view decodes m's payload into what its template shows.
func (ml *Mail) view(m *approval.OutboxMessage) (mailView, error) {
	base := strings.TrimSuffix(ml.PublicURL, "/")
	if m.Kind == approval.OutboxSignin {
		var sg approval.Signin
		if err := json.Unmarshal(m.Payload, &sg); err != nil {
			return mailView{}, fmt.Errorf("decode sign-in link of %s: %w", m.ID, err)
		}
		if sg.Token == "" {
			// Redacted once sent: an operator's retry of a sent link has nothing to send.
			return mailView{}, fmt.Errorf("sign-in link %s no longer holds its token; ask for a new link", m.ID)
		}
		return mailView{
			Template: "signin", Subject: "Your approvald sign-in link", Expires: sg.ExpiresAt,
			Link: base + web.SigninLinkPath(sg.Token, sg.Next),
		}, nil
	}
	if m.Kind != approval.OutboxNotification {
		return mailView{}, fmt.Errorf("message %s is a %s, not a notification or sign-in link", m.ID, m.Kind)
	}
	var n approval.Notice
	if err := json.Unmarshal(m.Payload, &n); err != nil {
		return mailView{}, fmt.Errorf("decode notice of %s: %w", m.ID, err)
	}
	return mailView{
		Template: "notice", Subject: Subject(n), Notice: n,
		Link: base + web.ApprovalPath(n.ApprovalID),
	}, nil
}

// Details are the lines a notice that asks for a vote adds to its subject, in the chat
// message: the stage and the rules' progress under a policy, and when the approval expires.
func Details(n approval.Notice) []string {
	switch n.Event {
	case approval.EventRequested, approval.EventStageStarted, approval.EventReminder:
	default:
		return nil
	}
	var lines []string
	if n.Policy != nil {
		lines = append(lines, "Stage: "+n.Policy.StageLine(), "Progress: "+n.Policy.ProgressLine())
	}
	return append(lines, "Expires: "+n.ExpiresAt.Format(expiryLayout))
}

// expiryLayout is how mails and chat messages show an expiry.
const expiryLayout = "2006-01-02 15:04 MST"

// Subject is a notice's one line: what happened to which approval.
func Subject(n approval.Notice) string {
	switch n.Event {
	case approval.EventRequested:
		return fmt.Sprintf("Approval requested by %s: %s", n.Requester, n.Title)
	case approval.EventStageStarted:
		if n.Policy != nil {
			return fmt.Sprintf("Approval requested by %s (%s): %s", n.Requester, n.Policy.StageLine(), n.Title)
		}
		return fmt.Sprintf("Approval requested by %s: %s", n.Requester, n.Title)
	case approval.EventReminder:
		return fmt.Sprintf("Reminder: approval requested by %s: %s", n.Requester, n.Title)
	case approval.EventNeedsReview:
		return fmt.Sprintf("Execution needs review: %s (%s)", n.Action, n.OperationKey)
	}
	return fmt.Sprintf("%s: %s", titleCase(string(n.Status)), n.Title)
}

func titleCase(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// The templates: one per kind of mail, the same in text and HTML. No mail carries a link
// that decides anything: the reader goes to the page and decides there, signed in.
const noticeText = `{{define "notice"}}{{with .Notice}}{{if or (eq .Event "approval.requested") (eq .Event "approval.stage_started") (eq .Event "approval.reminder")}}{{if ne .Event "approval.requested"}}{{template "ask" .}}

{{end}}{{.Requester}} asks for your approval:

  {{.Title}}

Action: {{.Action}}
Operation key: {{.OperationKey}}
{{with .Policy}}Stage: {{.StageLine}}
Progress: {{.ProgressLine}}
{{end}}Expires: {{.ExpiresAt.Format "2006-01-02 15:04 MST"}}
{{else if eq .Event "execution.needs_review"}}The execution of {{.Action}} ({{.OperationKey}}) needs an operator's review:

  {{.Reason}}
{{else}}The approval "{{.Title}}" is {{.Status}}{{if and .Actor (ne .Actor "system")}} by {{.Actor}}{{end}}.
{{end}}{{end}}
Open it: {{.Link}}
{{end}}`

const noticeHTML = `{{define "notice"}}<!DOCTYPE html>
<html><body>{{with .Notice}}{{if or (eq .Event "approval.requested") (eq .Event "approval.stage_started") (eq .Event "approval.reminder")}}{{if ne .Event "approval.requested"}}<p>{{template "ask" .}}</p>
{{end}}<p>{{.Requester}} asks for your approval:</p>
<p><strong>{{.Title}}</strong></p>
<p>Action: {{.Action}}<br>Operation key: {{.OperationKey}}<br>{{with .Policy}}Stage: {{.StageLine}}<br>Progress: {{.ProgressLine}}<br>{{end}}Expires: {{.ExpiresAt.Format "2006-01-02 15:04 MST"}}</p>
{{else if eq .Event "execution.needs_review"}}<p>The execution of {{.Action}} ({{.OperationKey}}) needs an operator's review:</p>
<p>{{.Reason}}</p>
{{else}}<p>The approval <strong>{{.Title}}</strong> is {{.Status}}{{if and .Actor (ne .Actor "system")}} by {{.Actor}}{{end}}.</p>
{{end}}{{end}}<p><a href="{{.Link}}">Open it in approvald</a></p>
</body></html>
{{end}}`

// askIntro opens a notice that asks for a vote again: a later stage's start, a reminder.
const askIntro = `{{define "ask"}}{{if eq .Event "approval.stage_started"}}The earlier stages are met: your stage is asked now.{{else if eq .Event "approval.reminder"}}Reminder: your vote is still asked; the approval expires on {{.ExpiresAt.Format "2006-01-02 15:04 MST"}}.{{end}}{{end}}`

// The sign-in mail holds the link and nothing else that acts: the link opens a page that asks
// to confirm, so a scanner that follows it signs nobody in.
const signinText = `{{define "signin"}}Someone, probably you, asked to sign in to approvald.

Sign in: {{.Link}}

The link works once, until {{.Expires.Format "2006-01-02 15:04 MST"}}. If you did not ask for it, ignore this mail: nothing happens unless the link is opened and confirmed.
{{end}}`

const signinHTML = `{{define "signin"}}<!DOCTYPE html>
<html><body><p>Someone, probably you, asked to sign in to approvald.</p>
<p><a href="{{.Link}}">Sign in to approvald</a></p>
<p>The link works once, until {{.Expires.Format "2006-01-02 15:04 MST"}}. If you did not ask for it, ignore this mail: nothing happens unless the link is opened and confirmed.</p>
</body></html>
{{end}}`

var (
	textMail = texttemplate.Must(texttemplate.Must(texttemplate.Must(texttemplate.New("mail").Parse(noticeText)).Parse(signinText)).Parse(askIntro))
	htmlMail = template.Must(template.Must(template.Must(template.New("mail").Parse(noticeHTML)).Parse(signinHTML)).Parse(askIntro))
)
