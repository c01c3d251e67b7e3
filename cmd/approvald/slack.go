package main

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"github.com/slack-go/slack"

	"github.com/approvald/approval"
	"github.com/approvald/approval/failpoint"
	"github.com/approvald/approval/notify"
)

// DefaultSlackAPIURL is Slack's Web API, where slack.api_url points unless a test or a proxy
// says otherwise.
const DefaultSlackAPIURL = "https://slack.com/api/"

// The errors of the slack section.
var (
	ErrSlackToken     = errors.New("must be a bot token (xoxb-...)")
	ErrSlackChannel   = errors.New("must be a Slack channel id such as C0DEPLOYS")
	ErrSlackUser      = errors.New("must be a Slack user id such as U0ALICE")
	ErrNoSlack        = errors.New("a Slack user needs the slack section")
	ErrReservedSource = errors.New("is the name of the Slack interactions in the inbox; choose another")
)

// SlackConfig is the Slack app approvald posts as and whose interactions it takes
// (docs/slack.md).
type SlackConfig struct {
	// BotToken is the app's bot token (xoxb-...), with the scopes chat:write, im:write,
	// users:read, users:read.email, im:history and channels:history (docs/slack.md).
	BotToken string `yaml:"bot_token"`
	// SigningSecret verifies the interactions Slack posts to /v1/slack/interactions.
	SigningSecret string `yaml:"signing_secret"`
	// APIURL is the Web API's base URL, DefaultSlackAPIURL when empty.
	APIURL string `yaml:"api_url"`
	// Channel, when set, is a channel id that gets a post of every approval besides the
	// approvers' direct messages.
	Channel string `yaml:"channel"`
}

var (
	slackChannelID = regexp.MustCompile(`^[CG][A-Z0-9]{2,}$`)
	slackUserID    = regexp.MustCompile(`^[UW][A-Z0-9]{2,}$`)
)

// validate checks the section and fills in the API's default URL, with a trailing slash (the
// client appends method names to it).
func (s *SlackConfig) validate() error {
	switch {
	case s.BotToken == "":
		return fmt.Errorf("bot_token: %w", ErrRequired)
	case !strings.HasPrefix(s.BotToken, "xoxb-"):
		return fmt.Errorf("bot_token: %w", ErrSlackToken)
	case s.SigningSecret == "":
		return fmt.Errorf("signing_secret: %w", ErrRequired)
	case s.Channel != "" && !slackChannelID.MatchString(s.Channel):
		return fmt.Errorf("channel: %w", ErrSlackChannel)
	}
	if s.APIURL == "" {
		s.APIURL = DefaultSlackAPIURL
	}
	if !isHTTPURL(s.APIURL) {
		return fmt.Errorf("api_url: %w", ErrInvalidURL)
	}
	if !strings.HasSuffix(s.APIURL, "/") {
		s.APIURL += "/"
	}
	return nil
}

// validateSlack checks the slack section and the people's Slack users.
func (c *Config) validateSlack() error {
	for i, s := range c.Sources {
		if s.Name == slackSource {
			return fmt.Errorf("sources[%d].name: %q %w", i, s.Name, ErrReservedSource)
		}
	}
	if c.Slack != nil {
		if err := c.Slack.validate(); err != nil {
			return fmt.Errorf("slack.%w", err)
		}
	}
	for i, p := range c.People {
		if p.Slack == "" {
			continue
		}
		if c.Slack == nil {
			return fmt.Errorf("people[%d].slack: %w", i, ErrNoSlack)
		}
		if !slackUserID.MatchString(p.Slack) {
			return fmt.Errorf("people[%d].slack: %w", i, ErrSlackUser)
		}
	}
	return nil
}

// slackSource is the inbox source of Slack's interactions (approval.SourceSlack).
const slackSource = "slack"

// slackRouting is the Slack part of the routing, nil without the slack section: a person with
// a Slack user or an e-mail address to find it by is notified in Slack (added to channels).
func (c *Config) slackRouting(channels map[string][]string) *approval.SlackRouting {
	if c.Slack == nil {
		return nil
	}
	sr := &approval.SlackRouting{Users: map[string]string{}, Emails: map[string]string{}, Channel: c.Slack.Channel}
	for _, p := range c.People {
		if p.Slack != "" {
			sr.Users[p.Name] = p.Slack
		}
		if p.Email != "" {
			sr.Emails[p.Name] = p.Email
		}
		if p.Slack != "" || p.Email != "" {
			channels[p.Name] = append(channels[p.Name], approval.ChannelSlack)
		}
	}
	return sr
}

// slackSender is the outbox's Slack channel.
func (c *Config) slackSender(rules *approval.Service, fp *failpoint.Set) *notify.Slack {
	s := &notify.Slack{
		Client:     slack.New(c.Slack.BotToken, slack.OptionAPIURL(c.Slack.APIURL)),
		Rules:      rules,
		PublicURL:  c.Web.PublicURL,
		Failpoints: fp,
	}
	if u, err := url.Parse(c.Slack.APIURL); err == nil && u.Host != "slack.com" {
		// A Slack other than slack.com (a test's fake, a proxy) answers at its own origin.
		s.ResponseOrigins = []string{u.Scheme + "://" + u.Host}
	}
	return s
}

// slackSigningSecret is the secret interactions are verified with, "" without Slack.
func (c *Config) slackSigningSecret() string {
	if c.Slack == nil {
		return ""
	}
	return c.Slack.SigningSecret
}
