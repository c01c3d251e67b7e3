package main

import (
	"fmt"
	"net"
	"net/mail"
	"net/url"
	"strings"

	"github.com/approvald/approval"
	"github.com/approvald/approval/notify"
	"github.com/approvald/approval/webhook"
	"github.com/approvald/approval/worker"
)

// SMTPConfig is the mail server notifications are sent through (docs/notifications.md).
type SMTPConfig struct {
	Host     string `yaml:"host"`
	Port     int    `yaml:"port"`     // 587 when zero
	StartTLS string `yaml:"starttls"` // required (default), opportunistic, none
	Username string `yaml:"username"`
	Password string `yaml:"password"`
	From     string `yaml:"from"`
}

// PersonConfig says how to reach one person: by e-mail, by a chat webhook, or both.
type PersonConfig struct {
	Name  string `yaml:"name"`
	Email string `yaml:"email"`
	Chat  string `yaml:"chat"` // a Slack-compatible incoming webhook URL
	// Slack is the person's Slack user id (U0ALICE); without it, their Slack user is found
	// by their e-mail address (docs/slack.md).
	Slack string `yaml:"slack"`
}

// NotificationsConfig names who is told of executions needing review.
type NotificationsConfig struct {
	Operators []string `yaml:"operators"`
}

// CallbacksConfig configures decision callbacks: the per-requester URLs and the secrets they
// are signed with.
type CallbacksConfig struct {
	Secret     string            `yaml:"secret"` // whsec_...; per requester overrides it
	Requesters []RequesterConfig `yaml:"requesters"`
	// AllowedOrigins are the origins a create's callback_url may name, each a scheme, a host
	// and an optional port ("https://ci.example.com", "https://hooks.example.com:8443"; no
	// port is the scheme's default): a callback_url must match one on all three. Empty:
	// callback_url is refused.
	AllowedOrigins []string `yaml:"allowed_origins"`
	// AllowedHosts is refused: entries name a port too, in AllowedOrigins.
	AllowedHosts []string `yaml:"allowed_hosts"`
	// AllowHTTPLoopback lets a callback_url use plain http to a loopback host.
	AllowHTTPLoopback bool `yaml:"allow_http_loopback"`
	// AllowPrivate lets callbacks connect to loopback, private, link-local and other
	// non-public addresses, which are refused by default wherever the name resolves to.
	AllowPrivate bool `yaml:"allow_private"`
}

// RequesterConfig is one requester's callback.
type RequesterConfig struct {
	Name   string `yaml:"name"`
	URL    string `yaml:"url"`
	Secret string `yaml:"secret"`
}

func (c *Config) validateNotifications() error {
	if s := c.SMTP; s != nil {
		switch {
		case s.Host == "":
			return fmt.Errorf("smtp.host: %w", ErrRequired)
		case s.Port < 0 || s.Port > 65535:
			return fmt.Errorf("smtp.port: %w", ErrInvalidPort)
		case s.StartTLS != "" && s.StartTLS != notify.StartTLSRequired && s.StartTLS != notify.StartTLSOpportunistic && s.StartTLS != notify.StartTLSNone:
			return fmt.Errorf("smtp.starttls: %w", ErrInvalidMode)
		}
		if _, err := mail.ParseAddress(s.From); err != nil {
			return fmt.Errorf("smtp.from: %w", ErrInvalidEmail)
		}
	}
	seen := map[string]bool{}
	for i, p := range c.People {
		field := fmt.Sprintf("people[%d]", i)
		if p.Name == "" {
			return fmt.Errorf("%s.name: %w", field, ErrRequired)
		} else if seen[p.Name] {
			return fmt.Errorf("%s.name: %w", field, ErrDuplicateName)
		}
		seen[p.Name] = true
		if p.Email != "" {
			if _, err := mail.ParseAddress(p.Email); err != nil {
				return fmt.Errorf("%s.email: %w", field, ErrInvalidEmail)
			}
			if c.SMTP == nil && c.Slack == nil {
				// An address serves mail, or finding the person's Slack user.
				return fmt.Errorf("%s.email: %w", field, ErrNoSMTP)
			}
		}
		if p.Chat != "" && !isHTTPURL(p.Chat) {
			return fmt.Errorf("%s.chat: %w", field, ErrInvalidURL)
		}
	}
	checkSecret := func(field, secret string) error {
		if secret == "" {
			return nil
		}
		v := webhook.Verifier{Scheme: webhook.SchemeStandard, Secrets: []string{secret}}
		if v.Validate() != nil {
			return fmt.Errorf("%s: %w", field, ErrInvalidSecret)
		}
		return nil
	}
	if err := checkSecret("callbacks.secret", c.Callbacks.Secret); err != nil {
		return err
	}
	if c.Web.SigninLinks != nil && c.SMTP == nil {
		return fmt.Errorf("web.signin_links: %w", ErrNoSMTP)
	}
	if l := c.Web.SigninLinks; l != nil {
		if _, err := l.trustedProxies(); err != nil {
			return err
		}
		if l.TrackedAddresses < 0 {
			return fmt.Errorf("web.signin_links.tracked_addresses: %w", ErrNegative)
		}
	}
	if len(c.Callbacks.AllowedHosts) > 0 {
		return fmt.Errorf("callbacks.allowed_hosts: %w", ErrAllowedHosts)
	}
	for i, o := range c.Callbacks.AllowedOrigins {
		if err := checkOrigin(o, c.Callbacks.AllowHTTPLoopback); err != nil {
			return fmt.Errorf("callbacks.allowed_origins[%d]: %w", i, err)
		}
	}
	seen = map[string]bool{}
	for i, r := range c.Callbacks.Requesters {
		field := fmt.Sprintf("callbacks.requesters[%d]", i)
		if r.Name == "" {
			return fmt.Errorf("%s.name: %w", field, ErrRequired)
		} else if seen[r.Name] {
			return fmt.Errorf("%s.name: %w", field, ErrDuplicateName)
		}
		seen[r.Name] = true
		if !isHTTPURL(r.URL) {
			return fmt.Errorf("%s.url: %w", field, ErrInvalidURL)
		}
		if err := checkSecret(field+".secret", r.Secret); err != nil {
			return err
		}
	}
	return nil
}

// routing is who the configuration tells of what: a person's channels are those they have an
// address for.
func (c *Config) routing() approval.Routing {
	r := approval.Routing{Channels: map[string][]string{}, Operators: c.Notifications.Operators, Callbacks: map[string]string{}, Emails: map[string]string{}}
	for _, p := range c.People {
		if p.Email != "" && c.SMTP != nil {
			r.Channels[p.Name] = append(r.Channels[p.Name], approval.ChannelEmail)
			r.Emails[p.Name] = p.Email
		}
		if p.Chat != "" {
			r.Channels[p.Name] = append(r.Channels[p.Name], approval.ChannelChat)
		}
	}
	for _, q := range c.Callbacks.Requesters {
		r.Callbacks[q.Name] = q.URL
	}
	for _, o := range c.Callbacks.AllowedOrigins {
		origin, _ := approval.CallbackOrigin(o) // checked by validateNotifications
		r.CallbackOrigins = append(r.CallbackOrigins, origin)
	}
	r.CallbackHTTPLoopback = c.Callbacks.AllowHTTPLoopback
	// The addresses OIDC providers verified are used only while both are configured: without
	// SMTP there is nothing to send them, and without OIDC nothing keeps them current.
	r.ProviderEmails = c.SMTP != nil && c.Web.OIDC != nil
	r.Slack = c.slackRouting(r.Channels)
	return r
}

// senders are the outbox's channels, with Slack's (nil without the slack section). A mail's
// address is resolved by rules (approval.Service.EmailAddress): the configured one, else the
// provider's.
func (c *Config) senders(rules *approval.Service, slackSender *notify.Slack) map[string]worker.Sender {
	people := map[string]PersonConfig{}
	for _, p := range c.People {
		people[p.Name] = p
	}
	senders := map[string]worker.Sender{
		approval.ChannelChat: &notify.Chat{
			URL:       func(p string) string { return people[p].Chat },
			PublicURL: c.Web.PublicURL,
		},
		approval.ChannelCallback: &notify.Callback{AllowPrivate: c.Callbacks.AllowPrivate, Secret: func(requester string) string {
			for _, q := range c.Callbacks.Requesters {
				if q.Name == requester && q.Secret != "" {
					return q.Secret
				}
			}
			return c.Callbacks.Secret
		}},
	}
	if slackSender != nil {
		senders[approval.ChannelSlack] = slackSender
	}
	if s := c.SMTP; s != nil {
		port := s.Port
		if port == 0 {
			port = 587
		}
		senders[approval.ChannelEmail] = &notify.Mail{
			Host: s.Host, Port: port, StartTLS: s.StartTLS, Username: s.Username, Password: s.Password,
			From: s.From, PublicURL: c.Web.PublicURL,
			Address: rules.EmailAddress,
		}
	}
	return senders
}

// checkOrigin checks an entry of callbacks.allowed_origins: a scheme, a host and an optional
// port, nothing else, and plain http only to a loopback host when allowHTTPLoopback.
func checkOrigin(entry string, allowHTTPLoopback bool) error {
	origin, err := approval.CallbackOrigin(entry)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidOrigin, err)
	}
	u, _ := url.Parse(entry) // CallbackOrigin parsed it
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || strings.Contains(u.Host, "*") {
		return ErrInvalidOrigin
	}
	if strings.HasPrefix(origin, "http:") {
		host := u.Hostname()
		ip := net.ParseIP(host)
		if !allowHTTPLoopback || (host != "localhost" && (ip == nil || !ip.IsLoopback())) {
			return ErrHTTPOrigin
		}
	}
	return nil
}
