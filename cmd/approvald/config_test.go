package main

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/approvald/approval/webhook"
	"github.com/approvald/approval/worker"
)

// designYAML is the core of the example in docs/configuration.md, "The file": the server,
// retention, workers, a source and an action, with an idempotency lease and an action timeout
// of its own so that they are seen to be read.
const designYAML = `
listen: 127.0.0.1:8080
database_url: file:approvald.db        # or postgres://user@host:5432/db
retention: {responses: 24h, inbox_ids: 720h}
workers: {lease: 30s, poll: 1s}           # claim lease of inbox, execution and notifier work
idempotency: {lease: 45s}
sources:
  - name: chat                         # POST /v1/inbox/chat
    scheme: standard-webhooks          # standard-webhooks | stripe | github
    secrets: ["${CHAT_SECRET_NEW}", "${CHAT_SECRET_OLD}"]
    tolerance: 5m
    handlers: [approval.decision]
actions:
  - name: deploy                       # approvals with "action": "deploy" run this target
    url: http://127.0.0.1:9000/deploy
    secret: ${DEPLOYER_SECRET}
    idempotent: true
    lookup_url: http://127.0.0.1:9000/deploy/status
    timeout: 10s
    max_attempts: 10
    backoff: {initial: 1s, max: 10m, multiplier: 2, jitter: 0.2}
    async: false
`

func TestParseConfig(t *testing.T) {
	t.Setenv("CHAT_SECRET_NEW", "whsec_bmV3LXNlY3JldA==")
	t.Setenv("CHAT_SECRET_OLD", "whsec_b2xkLXNlY3JldA==")
	t.Setenv("DEPLOYER_SECRET", "whsec_ZGVwbG95ZXI=")

	got, err := ParseConfig(strings.NewReader(designYAML))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	want := Config{
		Listen:      "127.0.0.1:8080",
		DatabaseURL: "file:approvald.db",
		Retention:   RetentionConfig{Responses: 24 * time.Hour, InboxIDs: 720 * time.Hour},
		Workers:     WorkersConfig{Lease: 30 * time.Second, Poll: time.Second, Concurrency: DefaultWorkerConcurrency},
		Idempotency: IdempotencyConfig{Lease: 45 * time.Second},
		Log:         LogConfig{FlushInterval: DefaultLogFlushInterval},
		Limits:      DefaultConfig().Limits,
		Bootstrap:   BootstrapConfig{TokenTTL: DefaultBootstrapTokenTTL},
		Sources: []SourceConfig{{
			Name:      "chat",
			Scheme:    "standard-webhooks",
			Secrets:   []string{"whsec_bmV3LXNlY3JldA==", "whsec_b2xkLXNlY3JldA=="},
			Tolerance: 5 * time.Minute,
			Handlers:  []string{"approval.decision"},
		}},
		Actions: []ActionConfig{{
			Name:        "deploy",
			URL:         "http://127.0.0.1:9000/deploy",
			Secret:      "whsec_ZGVwbG95ZXI=",
			Idempotent:  true,
			LookupURL:   "http://127.0.0.1:9000/deploy/status",
			Timeout:     10 * time.Second,
			MaxAttempts: 10,
			Backoff:     BackoffConfig{Initial: time.Second, Max: 10 * time.Minute, Multiplier: 2, Jitter: 0.2},
		}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("validate: %v", err)
	}
}

func TestParseConfig_Defaults(t *testing.T) {
	for name, text := range map[string]string{
		"empty file":    "",
		"comment only":  "# nothing set\n",
		"partial block": "retention: {responses: 1h}\n",
	} {
		t.Run(name, func(t *testing.T) {
			got, err := ParseConfig(strings.NewReader(text))
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			want := DefaultConfig()
			if name == "partial block" {
				want.Retention.Responses = time.Hour // inbox_ids keeps its default
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got %+v, want %+v", got, want)
			}
			if err := got.Validate(); err != nil {
				t.Errorf("validate: %v", err)
			}
		})
	}
}

// TestParseConfig_DesignDefaults pins the documented defaults (docs/configuration.md) as
// literals, so changing a Default* constant fails here (TestParseConfig_Defaults compares with
// DefaultConfig and would follow it). An empty file has no sources, so a source's default
// tolerance is read from a second file that names one without a tolerance.
func TestParseConfig_DesignDefaults(t *testing.T) {
	c, err := ParseConfig(strings.NewReader(""))
	if err != nil {
		t.Fatalf("parse empty file: %v", err)
	}
	for _, tt := range []struct {
		name      string
		got, want any
	}{
		{"listen", c.Listen, "127.0.0.1:8080"},
		{"database_url", c.DatabaseURL, "file:approvald.db"},
		{"retention.responses", c.Retention.Responses, 24 * time.Hour},
		{"retention.inbox_ids", c.Retention.InboxIDs, 720 * time.Hour},
		{"workers.lease", c.Workers.Lease, 30 * time.Second},
		{"workers.poll", c.Workers.Poll, 1 * time.Second},
		{"log.flush_interval", c.Log.FlushInterval, 100 * time.Millisecond},
		{"limits.request_timeout", c.Limits.RequestTimeout, 30 * time.Second},
	} {
		if tt.got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.name, tt.got, tt.want)
		}
	}

	c, err = ParseConfig(strings.NewReader("sources: [{name: gh, scheme: github, secrets: [x]}]"))
	if err != nil {
		t.Fatalf("parse source without tolerance: %v", err)
	}
	if got, want := c.Sources[0].Tolerance, 5*time.Minute; got != want {
		t.Errorf("sources[0].tolerance: got %v, want %v", got, want)
	}
}

func TestParseConfig_SourceToleranceDefault(t *testing.T) {
	c, err := ParseConfig(strings.NewReader("sources: [{name: gh, scheme: github, secrets: [x]}]"))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	if got := c.Sources[0].Tolerance; got != DefaultSourceTolerance {
		t.Errorf("got tolerance %s, want %s", got, DefaultSourceTolerance)
	}
}

func TestParseConfig_Errors(t *testing.T) {
	for _, tt := range []struct {
		name, text, want string
	}{
		{"unknown field", "listen: 127.0.0.1:1\nlistne: x\n", `line 2: unknown setting "listne" (did you mean "listen"?)`},
		{"unknown field far from any", "listen: 127.0.0.1:1\n\nport: 8080\n", `line 3: unknown setting "port"; the settings there are actions, bootstrap, callbacks, database_url, groups, idempotency, limits, listen, log, metrics, notifications, people, policies, retention, slack, smtp, sources, web, workers`},
		{"unknown field in a policy", "policies:\n  - name: p\n    match: {action: a}\n    rule: []\n", `line 4: unknown setting "rule" in policies[0] (did you mean "rules"?)`},
		{"bad duration in a policy", "policies:\n  - {name: p, expires_in: 1}\n", `line 2: policies[0].expires_in: "1" is not a duration`},
		{"groups not a map", "groups: [sre]\n", `line 1: groups is a list; write "name: value" lines`},
		{"unknown nested field", "retention: {response: 1h}\n", `line 1: unknown setting "response" in retention (did you mean "responses"?)`},
		{"unknown field in a list item", "actions:\n  - name: a\n    url: http://x\n    timout: 5s\n", `line 4: unknown setting "timout" in actions[0] (did you mean "timeout"?)`},
		{"duration without unit", "workers:\n  lease: 30\n", `line 2: workers.lease: "30" is not a duration; write 30s or 1m`},
		{"bad duration", "workers: {poll: soon}\n", `line 1: workers.poll: "soon" is not a duration; write 30s or 1m`},
		{"nested bad duration", "actions:\n  - name: a\n    url: http://x\n    backoff: {initial: 1}\n", `line 4: actions[0].backoff.initial: "1" is not a duration`},
		{"not a whole number", "workers: {concurrency: four}\n", `line 1: workers.concurrency: "four" is not a whole number`},
		{"not a switch", "actions: [{name: a, url: 'http://x', idempotent: maybe}]\n", `line 1: actions[0].idempotent: "maybe" is not true or false`},
		{"a map where a value belongs", "listen: {host: x}\n", "line 1: listen is a map of settings; write a single value"},
		{"a value where a list belongs", "sources: chat\n", "line 1: sources is a single value; write a list"},
		{"unset variable", "actions: [{name: a, url: 'http://x', secret: '${NO_SUCH_SECRET}'}]\n", "NO_SUCH_SECRET"},
		{"all unset variables named", "listen: ${NO_SUCH_B}\ndatabase_url: $NO_SUCH_A\n", "NO_SUCH_A, NO_SUCH_B"},
		{"two documents", "listen: 127.0.0.1:1\n---\nlisten: 127.0.0.1:2\n", "more than one YAML document"},
		{"not a mapping", "- a\n- b\n", `line 1: the configuration is a list; write settings as "name: value" lines`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig(strings.NewReader(tt.text))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// TestParseConfig_ErrorsHideSecrets: the YAML decoder quotes values it cannot use; after ${ENV}
// expansion those can be secrets, so errors must quote the file as written, never the value.
func TestParseConfig_ErrorsHideSecrets(t *testing.T) {
	const secret = "ghs_do-not-print-me"
	t.Setenv("APPROVALD_TEST_SECRET", secret)
	t.Setenv("APPROVALD_TEST_SECRET_MAP", "{a: "+secret+"}")
	for _, text := range []string{
		// A scalar where a list belongs: fails before and after expansion.
		"sources: [{name: gh, scheme: github, secrets: ${APPROVALD_TEST_SECRET}}]\n",
		// Only the expanded text fails: the value turns into a mapping.
		"sources: [{name: gh, scheme: github, secrets: [${APPROVALD_TEST_SECRET_MAP}]}]\n",
	} {
		_, err := ParseConfig(strings.NewReader(text))
		if err == nil {
			t.Fatalf("%q: got no error", text)
		}
		if strings.Contains(err.Error(), secret[:5]) { // the decoder quotes only a prefix of long values
			t.Errorf("%q: error %q shows the secret", text, err)
		}
	}
}

func TestParseConfig_Expansion(t *testing.T) {
	t.Setenv("APPROVALD_TEST_LISTEN_PORT", "9090")
	t.Setenv("SET_BUT_EMPTY", "")
	c, err := ParseConfig(strings.NewReader(
		"# a price of $5 and a literal $$ in a comment are left alone\n" +
			"listen: 127.0.0.1:${APPROVALD_TEST_LISTEN_PORT}\n" +
			"database_url: file:x${SET_BUT_EMPTY}.db\n"))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	if c.Listen != "127.0.0.1:9090" {
		t.Errorf("got listen %q, want 127.0.0.1:9090", c.Listen)
	}
	if c.DatabaseURL != "file:x.db" {
		t.Errorf("got database_url %q, want file:x.db", c.DatabaseURL)
	}
}

func TestConfig_ApplyEnv(t *testing.T) {
	env := map[string]string{
		"APPROVALD_LISTEN":                 "0.0.0.0:9000",
		"APPROVALD_DATABASE_URL":           "postgres://db/approvald",
		"APPROVALD_RETENTION_RESPONSES":    "1h",
		"APPROVALD_RETENTION_INBOX_IDS":    "48h",
		"APPROVALD_RETENTION_INBOX_BODIES": "12h",
		"APPROVALD_WORKERS_LEASE":          "1m",
		"APPROVALD_WORKERS_POLL":           "250ms",
		"APPROVALD_WORKERS_CONCURRENCY":    "16",
		"APPROVALD_IDEMPOTENCY_LEASE":      "10s",
		"APPROVALD_LOG_FLUSH_INTERVAL":     "0s",
		"APPROVALD_BOOTSTRAP_TOKEN_TTL":    "2h",
		"APPROVALD_LIMITS_REQUEST_TIMEOUT": "5s",
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	c := DefaultConfig()
	if err := c.ApplyEnv(os.LookupEnv); err != nil {
		t.Fatalf("apply env: %v", err)
	}
	limits := DefaultConfig().Limits
	limits.RequestTimeout = 5 * time.Second
	want := Config{
		Listen:      "0.0.0.0:9000",
		DatabaseURL: "postgres://db/approvald",
		Retention:   RetentionConfig{Responses: time.Hour, InboxIDs: 48 * time.Hour, InboxBodies: 12 * time.Hour},
		Workers:     WorkersConfig{Lease: time.Minute, Poll: 250 * time.Millisecond, Concurrency: 16},
		Idempotency: IdempotencyConfig{Lease: 10 * time.Second},
		Log:         LogConfig{FlushInterval: 0},
		Limits:      limits,
		Bootstrap:   BootstrapConfig{TokenTTL: 2 * time.Hour},
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("got %+v, want %+v", c, want)
	}

	t.Setenv("APPROVALD_WORKERS_CONCURRENCY", "many")
	if err := c.ApplyEnv(os.LookupEnv); err == nil || !strings.Contains(err.Error(), "APPROVALD_WORKERS_CONCURRENCY") {
		t.Errorf("bad number: got error %v, want one naming APPROVALD_WORKERS_CONCURRENCY", err)
	}
	t.Setenv("APPROVALD_WORKERS_CONCURRENCY", "16")

	t.Setenv("APPROVALD_WORKERS_POLL", "often")
	if err := c.ApplyEnv(os.LookupEnv); err == nil || !strings.Contains(err.Error(), "APPROVALD_WORKERS_POLL") {
		t.Errorf("bad duration: got error %v, want one naming APPROVALD_WORKERS_POLL", err)
	}
}

func TestConfig_Validate(t *testing.T) {
	const secret = "whsec_do-not-print-me"
	source := func() SourceConfig {
		return SourceConfig{Name: "chat", Scheme: "stripe", Secrets: []string{secret}, Tolerance: time.Minute, Handlers: []string{"approval.decision"}}
	}
	action := func() ActionConfig { return ActionConfig{Name: "deploy", URL: "https://deployer.internal/run"} }

	for _, tt := range []struct {
		name   string
		change func(*Config)
		field  string
		want   error
	}{
		{"listen without port", func(c *Config) { c.Listen = "localhost" }, "listen", ErrInvalidListen},
		{"database url empty", func(c *Config) { c.DatabaseURL = "" }, "database_url", ErrRequired},
		{"database url other scheme", func(c *Config) { c.DatabaseURL = "mysql://db" }, "database_url", ErrInvalidDBURL},
		{"zero response retention", func(c *Config) { c.Retention.Responses = 0 }, "retention.responses", ErrNotPositive},
		{"negative inbox retention", func(c *Config) { c.Retention.InboxIDs = -time.Hour }, "retention.inbox_ids", ErrNotPositive},
		{"zero worker lease", func(c *Config) { c.Workers.Lease = 0 }, "workers.lease", ErrNotPositive},
		{"zero poll", func(c *Config) { c.Workers.Poll = 0 }, "workers.poll", ErrNotPositive},
		{"zero idempotency lease", func(c *Config) { c.Idempotency.Lease = 0 }, "idempotency.lease", ErrNotPositive},
		{"zero request timeout", func(c *Config) { c.Limits.RequestTimeout = 0 }, "limits.request_timeout", ErrNotPositive},
		{"negative body retention", func(c *Config) { c.Retention.InboxBodies = -time.Hour }, "retention.inbox_bodies", ErrNegative},
		{"zero concurrency", func(c *Config) { c.Workers.Concurrency = 0 }, "workers.concurrency", ErrNotPositive},
		{"negative log flush interval", func(c *Config) { c.Log.FlushInterval = -time.Millisecond }, "log.flush_interval", ErrNegative},

		{"source without name", func(c *Config) { c.Sources[0].Name = "" }, "sources[0].name", ErrRequired},
		{"source name with slash", func(c *Config) { c.Sources[0].Name = "a/b" }, "sources[0].name", ErrInvalidName},
		{"duplicate source", func(c *Config) { c.Sources = append(c.Sources, source()) }, "sources[1].name", ErrDuplicateName},
		{"unknown scheme", func(c *Config) { c.Sources[0].Scheme = "slack" }, "sources[0].scheme", ErrInvalidScheme},
		{"no secrets", func(c *Config) { c.Sources[0].Secrets = nil }, "sources[0].secrets", ErrNoSecrets},
		{"empty secret", func(c *Config) { c.Sources[0].Secrets = append(c.Sources[0].Secrets, "") }, "sources[0].secrets[1]", ErrEmptySecret},
		{"zero tolerance", func(c *Config) { c.Sources[0].Tolerance = 0 }, "sources[0].tolerance", ErrNotPositive},
		{"unknown handler", func(c *Config) { c.Sources[0].Handlers = []string{"approval.decision", "x"} }, "sources[0].handlers[1]", ErrUnknownHandler},
		{"no handlers", func(c *Config) { c.Sources[0].Handlers = nil }, "sources[0].handlers", ErrRequired},
		{"negative max body", func(c *Config) { c.Sources[0].MaxBody = -1 }, "sources[0].max_body", ErrNegative},
		{"standard secret not base64", func(c *Config) {
			c.Sources[0].Scheme = "standard-webhooks"
			c.Sources[0].Secrets = []string{"whsec_c2VjcmV0", secret}
		}, "sources[0].secrets[1]", webhook.ErrBadSecret},

		{"email without smtp", func(c *Config) { c.People = []PersonConfig{{Name: "alice", Email: "alice@example.com"}} }, "people[0].email", ErrNoSMTP},
		{"person without name", func(c *Config) { c.People = []PersonConfig{{Chat: "https://hooks.example.com/x"}} }, "people[0].name", ErrRequired},
		{"chat not a url", func(c *Config) { c.People = []PersonConfig{{Name: "alice", Chat: "#ops"}} }, "people[0].chat", ErrInvalidURL},
		{"smtp without host", func(c *Config) { c.SMTP = &SMTPConfig{From: "a@example.com"} }, "smtp.host", ErrRequired},
		{"smtp bad from", func(c *Config) { c.SMTP = &SMTPConfig{Host: "mail", From: "nobody"} }, "smtp.from", ErrInvalidEmail},
		{"smtp bad mode", func(c *Config) { c.SMTP = &SMTPConfig{Host: "mail", From: "a@example.com", StartTLS: "maybe"} }, "smtp.starttls", ErrInvalidMode},
		{"callback url bad", func(c *Config) { c.Callbacks.Requesters = []RequesterConfig{{Name: "ci-bot", URL: "ci/hook"}} }, "callbacks.requesters[0].url", ErrInvalidURL},
		{"callback secret bad", func(c *Config) { c.Callbacks.Secret = "hunter2" }, "callbacks.secret", ErrInvalidSecret},
		{"signin links without smtp", func(c *Config) { c.Web.SigninLinks = &SigninLinksConfig{} }, "web.signin_links", ErrNoSMTP},
		{"trusted proxy not an address", func(c *Config) {
			c.SMTP = &SMTPConfig{Host: "mail", From: "a@example.com"}
			c.Web.SigninLinks = &SigninLinksConfig{TrustedProxies: []string{"10.0.0.0/8", "proxy.internal"}}
		}, "web.signin_links.trusted_proxies[1]", ErrInvalidPrefix},
		{"callback allowed_hosts", func(c *Config) { c.Callbacks.AllowedHosts = []string{"ci.example.com"} }, "callbacks.allowed_hosts", ErrAllowedHosts},
		{"callback origin bare host", func(c *Config) { c.Callbacks.AllowedOrigins = []string{"https://ci.example.com", "ci.example.com"} }, "callbacks.allowed_origins[1]", ErrInvalidOrigin},
		{"callback origin wildcard", func(c *Config) { c.Callbacks.AllowedOrigins = []string{"https://*.example.com"} }, "callbacks.allowed_origins[0]", ErrInvalidOrigin},
		{"callback origin path", func(c *Config) { c.Callbacks.AllowedOrigins = []string{"https://ci.example.com/hooks"} }, "callbacks.allowed_origins[0]", ErrInvalidOrigin},
		{"callback origin port 0", func(c *Config) { c.Callbacks.AllowedOrigins = []string{"https://ci.example.com:0"} }, "callbacks.allowed_origins[0]", ErrInvalidOrigin},
		{"callback origin port 99999", func(c *Config) { c.Callbacks.AllowedOrigins = []string{"https://ci.example.com:99999"} }, "callbacks.allowed_origins[0]", ErrInvalidOrigin},
		{"callback origin user", func(c *Config) { c.Callbacks.AllowedOrigins = []string{"https://u@ci.example.com"} }, "callbacks.allowed_origins[0]", ErrInvalidOrigin},
		{"callback origin http", func(c *Config) { c.Callbacks.AllowedOrigins = []string{"http://ci.example.com"} }, "callbacks.allowed_origins[0]", ErrHTTPOrigin},
		{"callback origin http loopback without opt-in", func(c *Config) { c.Callbacks.AllowedOrigins = []string{"http://127.0.0.1:8080"} }, "callbacks.allowed_origins[0]", ErrHTTPOrigin},
		{"tracked addresses negative", func(c *Config) {
			c.SMTP = &SMTPConfig{Host: "mail", From: "a@example.com"}
			c.Web.SigninLinks = &SigninLinksConfig{TrackedAddresses: -1}
		}, "web.signin_links.tracked_addresses", ErrNegative},

		{"slack without bot token", func(c *Config) { c.Slack = &SlackConfig{SigningSecret: "s"} }, "slack.bot_token", ErrRequired},
		{"slack user token", func(c *Config) { c.Slack = &SlackConfig{BotToken: "xoxp-1", SigningSecret: "s"} }, "slack.bot_token", ErrSlackToken},
		{"slack without signing secret", func(c *Config) { c.Slack = &SlackConfig{BotToken: "xoxb-1"} }, "slack.signing_secret", ErrRequired},
		{"slack api url not http", func(c *Config) {
			c.Slack = &SlackConfig{BotToken: "xoxb-1", SigningSecret: "s", APIURL: "slack.com/api"}
		}, "slack.api_url", ErrInvalidURL},
		{"slack channel by name", func(c *Config) { c.Slack = &SlackConfig{BotToken: "xoxb-1", SigningSecret: "s", Channel: "#deploys"} }, "slack.channel", ErrSlackChannel},
		{"slack user without slack", func(c *Config) { c.People = []PersonConfig{{Name: "alice", Slack: "U0ALICE"}} }, "people[0].slack", ErrNoSlack},
		{"slack user not an id", func(c *Config) {
			c.Slack = &SlackConfig{BotToken: "xoxb-1", SigningSecret: "s"}
			c.People = []PersonConfig{{Name: "alice", Slack: "@alice"}}
		}, "people[0].slack", ErrSlackUser},
		{"source named slack", func(c *Config) { c.Sources[0].Name = "slack" }, "sources[0].name", ErrReservedSource},

		{"zero connections", func(c *Config) { c.Limits.MaxConnections = 0 }, "limits.max_connections", ErrNotPositive},
		{"zero requests in flight", func(c *Config) { c.Limits.MaxInflightRequests = 0 }, "limits.max_inflight_requests", ErrNotPositive},
		{"requests above connections", func(c *Config) { c.Limits.MaxInflightRequests = c.Limits.MaxConnections + 1 }, "limits.max_inflight_requests", ErrAboveConnections},
		{"negative body budget", func(c *Config) { c.Limits.MaxInflightBodyBytes = -1 }, "limits.max_inflight_body_bytes", ErrNotPositive},
		{"body budget below a default max body", func(c *Config) { c.Limits.MaxInflightBodyBytes = DefaultSourceMaxBody - 1 }, "limits.max_inflight_body_bytes", ErrBelowMaxBody},
		{"body budget below a max body", func(c *Config) { c.Sources[0].MaxBody = c.Limits.MaxInflightBodyBytes + 1 }, "limits.max_inflight_body_bytes", ErrBelowMaxBody},

		{"action without name", func(c *Config) { c.Actions[0].Name = "" }, "actions[0].name", ErrRequired},
		{"duplicate action", func(c *Config) { c.Actions = append(c.Actions, action()) }, "actions[1].name", ErrDuplicateName},
		{"action url not http", func(c *Config) { c.Actions[0].URL = "ftp://x/y" }, "actions[0].url", ErrInvalidURL},
		{"action url relative", func(c *Config) { c.Actions[0].URL = "/deploy" }, "actions[0].url", ErrInvalidURL},
		{"action url missing", func(c *Config) { c.Actions[0].URL = "" }, "actions[0].url", ErrInvalidURL},
		{"lookup url bad", func(c *Config) { c.Actions[0].LookupURL = "deployer/status" }, "actions[0].lookup_url", ErrInvalidURL},
		{"negative timeout", func(c *Config) { c.Actions[0].Timeout = -time.Second }, "actions[0].timeout", ErrNegative},
		{"negative attempts", func(c *Config) { c.Actions[0].MaxAttempts = -1 }, "actions[0].max_attempts", ErrNegative},
		{"backoff max below initial", func(c *Config) { c.Actions[0].Backoff = BackoffConfig{Initial: time.Minute, Max: time.Second} }, "actions[0].backoff.max", ErrInvalidBackoff},
		{"backoff multiplier below 1", func(c *Config) { c.Actions[0].Backoff.Multiplier = 0.5 }, "actions[0].backoff.multiplier", ErrInvalidBackoff},
		{"backoff jitter above 1", func(c *Config) { c.Actions[0].Backoff.Jitter = 1.5 }, "actions[0].backoff.jitter", ErrInvalidBackoff},
		{"action secret not base64", func(c *Config) { c.Actions[0].Secret = secret }, "actions[0].secret", ErrInvalidSecret},

		{"bootstrap token ttl zero", func(c *Config) { c.Bootstrap.TokenTTL = 0 }, "bootstrap.token_ttl", ErrNotPositive},
		{"short session key", func(c *Config) { c.Web.SessionKey = "too-short" }, "web.session_key", ErrShortKey},
		{"negative session ttl", func(c *Config) { c.Web.SessionTTL = -time.Hour }, "web.session_ttl", ErrNegative},
		{"public url not http", func(c *Config) { c.Web.PublicURL = "approvals.example.com" }, "web.public_url", ErrInvalidURL},
		{"oidc without issuer", func(c *Config) { c.Web.OIDC = &OIDCConfig{ClientID: "a", RedirectURL: "https://x/cb"} }, "web.oidc.issuer", ErrInvalidURL},
		{"oidc without client id", func(c *Config) { c.Web.OIDC = &OIDCConfig{Issuer: "https://idp", RedirectURL: "https://x/cb"} }, "web.oidc.client_id", ErrRequired},
		{"oidc without redirect url", func(c *Config) { c.Web.OIDC = &OIDCConfig{Issuer: "https://idp", ClientID: "a"} }, "web.oidc.redirect_url", ErrInvalidURL},
		{"oidc domain with @", func(c *Config) {
			c.Web.OIDC = &OIDCConfig{Issuer: "https://idp", ClientID: "a", RedirectURL: "https://x/cb", AllowedDomains: []string{"@example.com"}}
		}, "web.oidc.allowed_domains[0]", ErrInvalidDomain},
		{"oidc subject claim neither sub nor email", func(c *Config) {
			c.Web.OIDC = &OIDCConfig{Issuer: "https://idp", ClientID: "a", RedirectURL: "https://x/cb", SubjectClaim: "preferred_username"}
		}, "web.oidc.subject_claim", ErrInvalidClaim},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			c.Sources = []SourceConfig{source()}
			c.Actions = []ActionConfig{action()}
			if err := c.Validate(); err != nil {
				t.Fatalf("valid config: %v", err)
			}
			tt.change(&c)
			err := c.Validate()
			if !errors.Is(err, tt.want) {
				t.Fatalf("got error %v, want %v", err, tt.want)
			}
			if !strings.HasPrefix(err.Error(), tt.field+":") {
				t.Errorf("got error %q, want it to start with %q", err, tt.field+":")
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error %q shows a secret", err)
			}
		})
	}
}

func TestParseDatabaseURL(t *testing.T) {
	for _, tt := range []struct {
		url, kind string
		err       error
	}{
		{"file:approvald.db", databaseSQLite, nil},
		{"file:/var/lib/approvald/approvald.db?_pragma=foreign_keys(1)", databaseSQLite, nil},
		{"approvald.db", databaseSQLite, nil},
		{"/var/lib/approvald.db", databaseSQLite, nil},
		{"postgres://user@host:5432/db", databasePostgres, nil},
		{"postgresql://host/db?sslmode=disable", databasePostgres, nil},
		{"mysql://host/db", "", ErrInvalidDBURL},
		{"", "", ErrRequired},
	} {
		kind, err := ParseDatabaseURL(tt.url)
		if kind != tt.kind || !errors.Is(err, tt.err) {
			t.Errorf("ParseDatabaseURL(%q): got %q, %v; want %q, %v", tt.url, kind, err, tt.kind, tt.err)
		}
	}
}

func TestActionConfig_Target(t *testing.T) {
	for _, tt := range []struct {
		name    string
		backoff BackoffConfig
		want    worker.Backoff
	}{
		{"left out", BackoffConfig{}, worker.DefaultPolicy.Backoff},
		{"jitter only", BackoffConfig{Jitter: 0.5}, worker.Backoff{Initial: time.Second, Max: 10 * time.Minute, Multiplier: 2, Jitter: 0.5}},
		{"initial above default max", BackoffConfig{Initial: time.Hour}, worker.Backoff{Initial: time.Hour, Max: time.Hour, Multiplier: 2}},
		{"all set", BackoffConfig{Initial: time.Millisecond, Max: time.Second, Multiplier: 3, Jitter: 0.1},
			worker.Backoff{Initial: time.Millisecond, Max: time.Second, Multiplier: 3, Jitter: 0.1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := ActionConfig{Name: "deploy", URL: "http://127.0.0.1:9000/", LookupURL: "http://127.0.0.1:9000/lookup", Backoff: tt.backoff}
			got := a.Target()
			want := worker.Target{
				Action:    "deploy",
				URL:       "http://127.0.0.1:9000/",
				LookupURL: "http://127.0.0.1:9000/lookup",
				Policy:    worker.Policy{MaxAttempts: worker.DefaultPolicy.MaxAttempts, HasLookup: true, Backoff: tt.want},
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got  %+v\nwant %+v", got, want)
			}
			if err := got.Policy.Validate(); err != nil {
				t.Errorf("policy: %v", err)
			}
		})
	}
}

func TestRetentionConfig_InboxBodyRetention(t *testing.T) {
	r := RetentionConfig{InboxIDs: 720 * time.Hour}
	if got := r.InboxBodyRetention(); got != 720*time.Hour {
		t.Errorf("left out: got %s, want inbox_ids 720h", got)
	}
	r.InboxBodies = 24 * time.Hour
	if got := r.InboxBodyRetention(); got != 24*time.Hour {
		t.Errorf("set: got %s, want 24h", got)
	}
}

func TestParseConfig_Web(t *testing.T) {
	t.Setenv("SESSION_KEY", "a-session-key-of-at-least-32-bytes!")
	t.Setenv("OIDC_SECRET", "s3cret")
	got, err := ParseConfig(strings.NewReader(`
web:
  public_url: https://approvals.example.com
  session_key: ${SESSION_KEY}
  session_ttl: 8h
  oidc:
    issuer: https://accounts.example.com
    client_id: approvald
    client_secret: ${OIDC_SECRET}
    redirect_url: https://approvals.example.com/ui/signin/oidc/callback
    subject_claim: email
    allowed_domains: [example.com]
    operators: [olga@example.com]
    groups_claim: roles
    scopes: [groups]
`))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	want := WebConfig{
		PublicURL: "https://approvals.example.com", SessionKey: "a-session-key-of-at-least-32-bytes!", SessionTTL: 8 * time.Hour,
		OIDC: &OIDCConfig{
			Issuer: "https://accounts.example.com", ClientID: "approvald", ClientSecret: "s3cret",
			RedirectURL: "https://approvals.example.com/ui/signin/oidc/callback", SubjectClaim: "email",
			AllowedDomains: []string{"example.com"}, Operators: []string{"olga@example.com"},
			GroupsClaim: "roles", Scopes: []string{"groups"},
		},
	}
	if !reflect.DeepEqual(got.Web, want) {
		t.Errorf("got  %+v\nwant %+v", got.Web, want)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("validate: %v", err)
	}
}

// TestConfigDatabasePath: a SQLite database that cannot be opened is explained by its
// directory and the reason, not by SQLite's "unable to open database file (14)".
func TestConfigDatabasePath(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "plain-file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	locked := filepath.Join(dir, "locked")
	if err := os.Mkdir(locked, 0o500); err != nil {
		t.Fatal(err)
	}
	cases := []struct{ name, url, want string }{
		{"a missing directory", "file:" + filepath.Join(dir, "missing", "approvald.db"), "the directory " + filepath.Join(dir, "missing") + " does not exist"},
		{"a bare path in a missing directory", filepath.Join(dir, "nope", "approvald.db"), "the directory " + filepath.Join(dir, "nope") + " does not exist"},
		{"a file where the directory belongs", "file:" + filepath.Join(file, "approvald.db"), file + " is not a directory"},
	}
	if os.Geteuid() != 0 { // root may create files anywhere: no permission to be denied
		cases = append(cases, struct{ name, url, want string }{"a directory this user may not write", "file:" + filepath.Join(locked, "approvald.db"),
			"may not create files in the directory " + locked + " (permission denied)"})
	}
	for _, c := range cases {
		_, err := openStore(t.Context(), c.url, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error saying %q", c.name, err, c.want)
		}
	}
	// A directory that exists opens.
	s, err := openStore(t.Context(), "file:"+filepath.Join(dir, "approvald.db"), nil)
	if err != nil {
		t.Fatalf("open in an existing directory: %v", err)
	}
	s.Close()
}

// TestValidateSubject: a token's subject is held to the input policy's rules for names, so a
// token cannot be made for a name the API would refuse as a requester or an approver.
func TestValidateSubject(t *testing.T) {
	for _, c := range []struct{ subject, want string }{
		{"ci-bot", ""},
		{"Zoë Martín", ""},
		{strings.Repeat("a", 100), ""},
		{strings.Repeat("a", 101), "--subject has 101 characters; at most 100 are allowed"},
		{"bad\xffutf8", "--subject is not valid UTF-8"},
		{"tab\there", "control characters"},
		{"next\u0085line", "control characters"},
		{" padded", "leading or trailing white space"},
	} {
		err := validateSubject(c.subject)
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("subject %q: got %v, want %q", c.subject, err, c.want)
		}
	}
}

// TestRoutingProviderEmails: the addresses identity providers verified are used only when
// there is both an SMTP server to send to them and OIDC sign-in to keep them current.
func TestRoutingProviderEmails(t *testing.T) {
	for _, c := range []struct {
		smtp, oidc, want bool
	}{{false, false, false}, {true, false, false}, {false, true, false}, {true, true, true}} {
		var cfg Config
		if c.smtp {
			cfg.SMTP = &SMTPConfig{Host: "smtp.example.com", From: "approvals@example.com"}
		}
		if c.oidc {
			cfg.Web.OIDC = &OIDCConfig{Issuer: "https://idp.example.com", ClientID: "a", RedirectURL: "https://x/cb"}
		}
		if got := cfg.routing().ProviderEmails; got != c.want {
			t.Errorf("smtp %v, oidc %v: ProviderEmails %v, want %v", c.smtp, c.oidc, got, c.want)
		}
	}
}

// TestParseConfig_BootstrapAndMetrics: bootstrap.token_ttl and metrics.token_required are
// read from the file; the token's lifetime defaults to a day and /metrics stays open.
func TestParseConfig_BootstrapAndMetrics(t *testing.T) {
	got, err := ParseConfig(strings.NewReader("bootstrap:\n  token_ttl: 2h\nmetrics:\n  token_required: true\n"))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	if got.Bootstrap.TokenTTL != 2*time.Hour || !got.Metrics.TokenRequired {
		t.Errorf("got %+v and %+v, want a 2h token and metrics behind a token", got.Bootstrap, got.Metrics)
	}
	def, err := ParseConfig(strings.NewReader(""))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	if def.Bootstrap.TokenTTL != DefaultBootstrapTokenTTL || def.Metrics.TokenRequired {
		t.Errorf("defaults: got %+v and %+v, want %s and open metrics", def.Bootstrap, def.Metrics, DefaultBootstrapTokenTTL)
	}
}

func TestConfig_Slack(t *testing.T) {
	c := DefaultConfig()
	c.Slack = &SlackConfig{BotToken: "xoxb-1", SigningSecret: "s", Channel: "C0DEPLOYS"}
	// With Slack, an address without SMTP finds the person's Slack user.
	c.People = []PersonConfig{{Name: "alice", Slack: "U0ALICE"}, {Name: "bob", Email: "bob@example.com"}}
	if err := c.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	if c.Slack.APIURL != DefaultSlackAPIURL {
		t.Errorf("api_url: got %q, want the default %q", c.Slack.APIURL, DefaultSlackAPIURL)
	}
	c.Slack.APIURL = "http://127.0.0.1:9/api"
	if err := c.Validate(); err != nil || c.Slack.APIURL != "http://127.0.0.1:9/api/" {
		t.Errorf("api_url without a trailing slash: got %q, %v; want it with one", c.Slack.APIURL, err)
	}
}
