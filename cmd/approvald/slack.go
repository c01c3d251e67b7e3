package main

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
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
	// users:read.email, im:history and channels:history.
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
