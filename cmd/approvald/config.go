package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/approvald/approval"
	"github.com/approvald/approval/httpapi"
	"github.com/approvald/approval/policy"
	"github.com/approvald/approval/webhook"
	"github.com/approvald/approval/worker"
)

// Defaults of a configuration with no file, no environment and no flags.
const (
	DefaultListen            = "127.0.0.1:8080"
	DefaultDatabaseURL       = "file:approvald.db"
	DefaultResponseRetention = 24 * time.Hour
	DefaultInboxIDRetention  = 30 * 24 * time.Hour
	DefaultWorkerLease       = 30 * time.Second
	DefaultWorkerPoll        = time.Second
	DefaultIdempotencyLease  = 30 * time.Second
	DefaultSourceTolerance   = 5 * time.Minute
	DefaultSourceMaxBody     = 1 << 20
	DefaultWorkerConcurrency = 4
	// DefaultBootstrapTokenTTL is how long the admin token serve prints on a new database
	// works: long enough to make the real tokens with it, short enough that a copy left in a
	// terminal or a deployment log does not stay an admin's key.
	DefaultBootstrapTokenTTL = 24 * time.Hour
)

// Errors returned by Validate, wrapped with the field they concern.
var (
	ErrRequired       = errors.New("required")
	ErrInvalidName    = errors.New("must be letters, digits, '.', '_' and '-', starting with a letter or digit")
	ErrDuplicateName  = errors.New("name already used")
	ErrInvalidPerson  = errors.New("is not a usable name of a person")
	ErrInvalidListen  = errors.New("must be host:port")
	ErrInvalidURL     = errors.New("must be an http or https URL with a host")
	ErrInvalidDBURL   = errors.New("must be file:PATH, a bare path, or a postgres:// URL")
	ErrNotPositive    = errors.New("must be greater than zero")
	ErrNegative       = errors.New("must not be negative")
	ErrInvalidScheme  = errors.New("must be one of standard-webhooks, stripe, github")
	ErrNoSecrets      = errors.New("at least one secret is required")
	ErrEmptySecret    = errors.New("secret is empty")
	ErrUnknownHandler = errors.New("unknown handler")
	ErrInvalidBackoff = errors.New("invalid backoff")
	ErrInvalidSecret  = errors.New("must be whsec_ followed by base64")
	ErrShortKey       = errors.New("must be at least 32 bytes")
	ErrInvalidDomain  = errors.New("must be a domain name such as example.com")
	ErrInvalidEmail   = errors.New("must be an e-mail address")
	ErrNoSMTP         = errors.New("an e-mail address needs the smtp section (or slack, to find the person in Slack)")
	ErrInvalidMode    = errors.New("must be required, opportunistic or none")
	ErrInvalidPort    = errors.New("must be 1 to 65535")
	ErrInvalidPrefix  = errors.New("must be an IP address or a CIDR prefix such as 10.0.0.0/8")
	ErrInvalidOrigin  = errors.New("must be a scheme, a host and an optional port, such as https://ci.example.com or https://hooks.example.com:8443")
	ErrHTTPOrigin     = errors.New("plain http is allowed only to a loopback host, with callbacks.allow_http_loopback")
	ErrAllowedHosts   = errors.New("entries must name scheme, host and port: list them in callbacks.allowed_origins, such as https://ci.example.com:443")
	// ErrAboveConnections: a request needs a connection, so a larger limit would never apply.
	ErrAboveConnections = errors.New("must not be more than limits.max_connections")
	// ErrBelowMaxBody: a delivery of the source's largest size could never be read.
	ErrBelowMaxBody = errors.New("must be at least the max_body of every source")
	ErrInvalidClaim = errors.New("must be sub or email")
)

// Webhook schemes a source may use.
var schemes = []string{"standard-webhooks", "stripe", "github"}

// Built-in inbox handlers a source may list.
var handlers = []string{"approval.decision", "execution.result"}

// Config is approvald's configuration: the YAML file, then APPROVALD_* environment variables,
// then command-line flags, each overriding the one before.
type Config struct {
	Listen      string            `yaml:"listen"`
	DatabaseURL string            `yaml:"database_url"`
	Retention   RetentionConfig   `yaml:"retention"`
	Workers     WorkersConfig     `yaml:"workers"`
	Idempotency IdempotencyConfig `yaml:"idempotency"`
	Sources     []SourceConfig    `yaml:"sources"`
	Actions     []ActionConfig    `yaml:"actions"`
	Web         WebConfig         `yaml:"web"`
	// The outbox's channels and routes (notifications.go, docs/notifications.md).
	SMTP          *SMTPConfig         `yaml:"smtp"`
	People        []PersonConfig      `yaml:"people"`
	Notifications NotificationsConfig `yaml:"notifications"`
	Callbacks     CallbacksConfig     `yaml:"callbacks"`
	Slack         *SlackConfig        `yaml:"slack"` // slack.go, docs/slack.md
	Log           LogConfig           `yaml:"log"`
	Limits        LimitsConfig        `yaml:"limits"`
	Bootstrap     BootstrapConfig     `yaml:"bootstrap"`
	Metrics       MetricsConfig       `yaml:"metrics"`
	// Who must approve what (docs/policies.md): groups of people and the ordered policies,
	// compiled by Validate.
	Groups   map[string]policy.Group `yaml:"groups"`
	Policies []policy.Policy         `yaml:"policies"`

	policies *policy.Set // compiled by Validate
}

// PolicySet returns the policies Validate compiled (nil before Validate).
func (c *Config) PolicySet() *policy.Set { return c.policies }

// LimitsConfig bounds what clients may hold of the server at once (docs/security.md, "Memory
// under hostile load"). Past each, a client is answered 503 with Retry-After.
type LimitsConfig struct {
	// MaxConnections is how many connections may be open at once; one accepted past it is
	// answered 503 and closed without its request being read.
	MaxConnections int `yaml:"max_connections"`
	// MaxInflightRequests is how many requests may be answered at once, long-polls included;
	// at most MaxConnections.
	MaxInflightRequests int `yaml:"max_inflight_requests"`
	// MaxInflightBodyBytes is the budget of the request bodies read before their sender is
	// known (webhook deliveries, sign-in forms), all together; at least every source's
	// max_body, so that a delivery of any allowed size can be read.
	MaxInflightBodyBytes int64 `yaml:"max_inflight_body_bytes"`
	// RequestTimeout is the deadline of an API or page request's work, the store's answers
	// included (a long-poll adds its wait; a create works within idempotency.lease instead);
	// past it the request is answered 503 with Retry-After (docs/operations.md, "Deadlines").
	RequestTimeout time.Duration `yaml:"request_timeout"`
}

// BootstrapConfig tunes the admin token serve makes and prints on a new database.
type BootstrapConfig struct {
	// TokenTTL is how long that token works after it is made; it must be positive. Once it
	// has expired, approvald token create (which needs the database, not a token) makes
	// another admin.
	TokenTTL time.Duration `yaml:"token_ttl"`
}

// MetricsConfig tunes GET /metrics.
type MetricsConfig struct {
	// TokenRequired makes /metrics answer only a request with a usable API token (of any
	// role); false leaves it open to whoever reaches the listen address.
	TokenRequired bool `yaml:"token_required"`
}

// LogConfig tunes serve's log (docs/operations.md, "Logs").
type LogConfig struct {
	// FlushInterval is how long a line below warning (the access lines, say) may be held
	// before it is written, with the others of the moment; warnings and errors are written at
	// once. 0 writes every line as it is logged.
	FlushInterval time.Duration `yaml:"flush_interval"`
}

// WebConfig configures the approver's pages under /ui/ (docs/web.md).
type WebConfig struct {
	// PublicURL is the address users reach approvald at; when it is https, cookies are
	// Secure even where TLS ends at a proxy in front.
	PublicURL string `yaml:"public_url"`
	// SessionKey signs session cookies and form tokens, at least 32 bytes. Replicas must
	// share it. Empty: a random key per process, with a warning in the log.
	SessionKey string `yaml:"session_key"`
	// SessionTTL is how long a sign-in lasts; 0 means web.DefaultSessionTTL.
	SessionTTL time.Duration `yaml:"session_ttl"`
	// OIDC enables sign-in with an OpenID Connect provider.
	OIDC *OIDCConfig `yaml:"oidc"`
	// SigninLinks enables sign-in links by e-mail for the people with an address (it needs
	// the smtp section).
	SigninLinks *SigninLinksConfig `yaml:"signin_links"`
}

// SigninLinksConfig is sign-in by e-mailed link: people are approvers under their name unless
// operators or admins name them.
type SigninLinksConfig struct {
	Operators []string `yaml:"operators"`
	Admins    []string `yaml:"admins"`
	// TrustedProxies are the addresses (10.0.0.5) or prefixes (10.0.0.0/8) of the proxies in
	// front of approvald, whose X-Forwarded-For names the client when sign-in link requests
	// are counted per client address. Empty: the connection's peer is the client, and
	// X-Forwarded-For is ignored.
	TrustedProxies []string `yaml:"trusted_proxies"`
	// TrackedAddresses bounds how many client addresses the per-address count of sign-in
	// link requests remembers; when full, the address whose count began first is forgotten.
	// 0 means web.DefaultTrackedAddresses.
	TrackedAddresses int `yaml:"tracked_addresses"`
}

// trustedProxies parses TrustedProxies; Validate has checked them.
func (c *SigninLinksConfig) trustedProxies() ([]netip.Prefix, error) {
	var out []netip.Prefix
	for i, v := range c.TrustedProxies {
		p, err := netip.ParsePrefix(v)
		if err != nil {
			a, aerr := netip.ParseAddr(v)
			if aerr != nil || a.Zone() != "" {
				return nil, fmt.Errorf("web.signin_links.trusted_proxies[%d]: %w", i, ErrInvalidPrefix)
			}
			p = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// OIDCConfig is sign-in with an OpenID Connect provider (authorization code flow with PKCE).
type OIDCConfig struct {
	Issuer       string `yaml:"issuer"`
	ClientID     string `yaml:"client_id"`
	ClientSecret string `yaml:"client_secret"`
	// RedirectURL is https://HOST/ui/signin/oidc/callback, as registered at the provider.
	RedirectURL string `yaml:"redirect_url"`
	// SubjectClaim is the claim that names the user: sub (the default), the provider's own
	// identifier, or email, which counts only when the provider verified it.
	SubjectClaim string `yaml:"subject_claim"`
	// AllowedDomains, when set, admits only verified e-mail addresses of these domains.
	AllowedDomains []string `yaml:"allowed_domains"`
	// TrustEmail counts an "email" claim without "email_verified" as verified (a provider
	// that gives only addresses it checked); an "email_verified" of false never is.
	TrustEmail bool `yaml:"trust_email"`
	// Operators and Admins name the users given those roles; everyone else is an approver.
	// An entry with an "@" matches only the address the provider verified, any other the
	// subject.
	Operators []string `yaml:"operators"`
	Admins    []string `yaml:"admins"`
	// GroupsClaim names the claim that lists the user's groups at the provider (groups by
	// default), stored at each sign-in for the groups' oidc_group (docs/policies.md).
	GroupsClaim string `yaml:"groups_claim"`
	// Scopes are asked for beside openid, email and profile (groups, for a provider that
	// sends the groups claim only when asked).
	Scopes []string `yaml:"scopes"`
}

// RetentionConfig says how long records that make retries safe are kept.
type RetentionConfig struct {
	// Responses is how long a create's stored response is replayed byte for byte.
	Responses time.Duration `yaml:"responses"`
	// InboxIDs is how long webhook event ids are remembered to acknowledge redeliveries.
	InboxIDs time.Duration `yaml:"inbox_ids"`
	// InboxBodies is how long the raw bodies of processed webhook events are kept, for
	// operators to read; 0 means as long as InboxIDs. The id outlives the body because a
	// redelivery is recognised by its id alone.
	InboxBodies time.Duration `yaml:"inbox_bodies"`
}

// WorkersConfig tunes the background workers.
type WorkersConfig struct {
	Lease time.Duration `yaml:"lease"` // how long a claim on a piece of work lasts
	Poll  time.Duration `yaml:"poll"`  // how often idle workers look for work
	// Concurrency is how many downstream calls the execution runner makes at once.
	Concurrency int `yaml:"concurrency"`
}

// IdempotencyConfig tunes creates under an Idempotency-Key.
type IdempotencyConfig struct {
	// Lease is how long an in-flight create holds its key before a retry may take it over.
	Lease time.Duration `yaml:"lease"`
}

// SourceConfig is one webhook source, served at POST /v1/inbox/{name}.
type SourceConfig struct {
	Name      string        `yaml:"name"`
	Scheme    string        `yaml:"scheme"`
	Secrets   []string      `yaml:"secrets"` // several at once while rotating
	Tolerance time.Duration `yaml:"tolerance"`
	Handlers  []string      `yaml:"handlers"`
	// MaxBody bounds a delivery's body in bytes, checked before any HMAC work; 0 means
	// DefaultSourceMaxBody.
	MaxBody int64 `yaml:"max_body"`
}

// ActionConfig is the execution target of approvals whose action is Name. Zero values of
// Timeout, MaxAttempts and Backoff take the defaults (see Policy).
type ActionConfig struct {
	Name        string        `yaml:"name"`
	URL         string        `yaml:"url"`
	Secret      string        `yaml:"secret"`
	Idempotent  bool          `yaml:"idempotent"`
	LookupURL   string        `yaml:"lookup_url"`
	Timeout     time.Duration `yaml:"timeout"`
	MaxAttempts int           `yaml:"max_attempts"`
	Backoff     BackoffConfig `yaml:"backoff"`
	Async       bool          `yaml:"async"`
}

// BackoffConfig is an exponential backoff with jitter. Left out altogether it is
// worker.DefaultPolicy's; given in part, a zero Initial, Max or Multiplier takes the default
// and Jitter is taken as written (0: none).
type BackoffConfig struct {
	Initial    time.Duration `yaml:"initial"`
	Max        time.Duration `yaml:"max"`
	Multiplier float64       `yaml:"multiplier"`
	Jitter     float64       `yaml:"jitter"` // fraction of each delay, 0 to 1
}

// DefaultConfig returns the configuration used when nothing is set.
func DefaultConfig() Config {
	return Config{
		Listen:      DefaultListen,
		DatabaseURL: DefaultDatabaseURL,
		Retention:   RetentionConfig{Responses: DefaultResponseRetention, InboxIDs: DefaultInboxIDRetention},
		Workers:     WorkersConfig{Lease: DefaultWorkerLease, Poll: DefaultWorkerPoll, Concurrency: DefaultWorkerConcurrency},
		Idempotency: IdempotencyConfig{Lease: DefaultIdempotencyLease},
		Log:         LogConfig{FlushInterval: DefaultLogFlushInterval},
		Limits: LimitsConfig{
			MaxConnections:       httpapi.DefaultMaxConnections,
			MaxInflightRequests:  httpapi.DefaultMaxInflightRequests,
			RequestTimeout:       httpapi.DefaultRequestTimeout,
			MaxInflightBodyBytes: httpapi.DefaultMaxInflightBodyBytes,
		},
		Bootstrap: BootstrapConfig{TokenTTL: DefaultBootstrapTokenTTL},
	}
}

// ParseConfig reads a YAML configuration over the defaults. ${NAME} (and $NAME) references
// to environment variables are expanded in the text first, so that secrets stay out of the
// file; a reference to an unset variable is an error naming it. Unknown fields are errors, so
// a typo does not silently leave a default in place.
func ParseConfig(r io.Reader) (Config, error) {
	text, err := io.ReadAll(r)
	if err != nil {
		return Config{}, fmt.Errorf("read config: %w", err)
	}
	expanded, err := expandEnv(string(text))
	if err != nil {
		return Config{}, err
	}

	c, err := decodeConfig(expanded)
	if err != nil {
		// The decoder quotes the values it could not use, and after expansion those may be
		// secrets. Report the error of the file as written, where the value is still the
		// ${VAR} reference; if only the expanded text fails, name no value at all.
		if _, rawErr := decodeConfig(string(text)); rawErr != nil {
			return Config{}, rawErr
		}
		return Config{}, errors.New("parse config: a value is invalid after ${ENV} expansion (check the variables the file references)")
	}
	for i := range c.Sources {
		if c.Sources[i].Tolerance == 0 {
			c.Sources[i].Tolerance = DefaultSourceTolerance
		}
	}
	return c, nil
}

// decodeConfig decodes one YAML document over the defaults, refusing unknown fields.
func decodeConfig(text string) (Config, error) {
	if err := checkConfigText(text); err != nil {
		return Config{}, err
	}
	c := DefaultConfig()
	dec := yaml.NewDecoder(strings.NewReader(text))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) { // EOF: an empty file
		return Config{}, fmt.Errorf("parse config: %w", err)
	}
	var extra any
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return Config{}, errors.New("parse config: more than one YAML document")
	}
	return c, nil
}

// ReadConfigFile parses the configuration file at path.
func ReadConfigFile(path string) (Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return Config{}, fmt.Errorf("open config: %w", err)
	}
	defer f.Close()
	c, err := ParseConfig(f)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// envOverrides maps each APPROVALD_* variable to the setting it overrides.
var envOverrides = []struct {
	name     string
	str      func(*Config) *string
	duration func(*Config) *time.Duration
	integer  func(*Config) *int
}{
	{name: "APPROVALD_LISTEN", str: func(c *Config) *string { return &c.Listen }},
	{name: "APPROVALD_DATABASE_URL", str: func(c *Config) *string { return &c.DatabaseURL }},
	{name: "APPROVALD_RETENTION_RESPONSES", duration: func(c *Config) *time.Duration { return &c.Retention.Responses }},
	{name: "APPROVALD_RETENTION_INBOX_IDS", duration: func(c *Config) *time.Duration { return &c.Retention.InboxIDs }},
	{name: "APPROVALD_RETENTION_INBOX_BODIES", duration: func(c *Config) *time.Duration { return &c.Retention.InboxBodies }},
	{name: "APPROVALD_WORKERS_LEASE", duration: func(c *Config) *time.Duration { return &c.Workers.Lease }},
	{name: "APPROVALD_WORKERS_POLL", duration: func(c *Config) *time.Duration { return &c.Workers.Poll }},
	{name: "APPROVALD_WORKERS_CONCURRENCY", integer: func(c *Config) *int { return &c.Workers.Concurrency }},
	{name: "APPROVALD_BOOTSTRAP_TOKEN_TTL", duration: func(c *Config) *time.Duration { return &c.Bootstrap.TokenTTL }},
	{name: "APPROVALD_IDEMPOTENCY_LEASE", duration: func(c *Config) *time.Duration { return &c.Idempotency.Lease }},
	{name: "APPROVALD_LIMITS_REQUEST_TIMEOUT", duration: func(c *Config) *time.Duration { return &c.Limits.RequestTimeout }},
	{name: "APPROVALD_LOG_FLUSH_INTERVAL", duration: func(c *Config) *time.Duration { return &c.Log.FlushInterval }},
}

// ApplyEnv overrides settings with the APPROVALD_* variables that lookup finds (os.LookupEnv
// in the binary).
func (c *Config) ApplyEnv(lookup func(string) (string, bool)) error {
	for _, o := range envOverrides {
		v, ok := lookup(o.name)
		if !ok {
			continue
		}
		if o.str != nil {
			*o.str(c) = v
			continue
		}
		if o.integer != nil {
			n, err := strconv.Atoi(v)
			if err != nil {
				return fmt.Errorf("%s: %q is not a whole number", o.name, v)
			}
			*o.integer(c) = n
			continue
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("%s: %q is not a duration such as 30s or 24h", o.name, v)
		}
		*o.duration(c) = d
	}
	return nil
}

// Validate checks the configuration, returning the first problem as a sentinel error
// wrapped with the field, e.g. "actions[1].url: must be an http or https URL with a host".
// Messages never include secret values.
func (c *Config) Validate() error {
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fmt.Errorf("listen: %w", ErrInvalidListen)
	}
	if _, err := ParseDatabaseURL(c.DatabaseURL); err != nil {
		return fmt.Errorf("database_url: %w", err)
	}
	for _, d := range []struct {
		field string
		value time.Duration
	}{
		{"retention.responses", c.Retention.Responses},
		{"retention.inbox_ids", c.Retention.InboxIDs},
		{"workers.lease", c.Workers.Lease},
		{"workers.poll", c.Workers.Poll},
		{"idempotency.lease", c.Idempotency.Lease},
		{"bootstrap.token_ttl", c.Bootstrap.TokenTTL},
		{"limits.request_timeout", c.Limits.RequestTimeout},
	} {
		if d.value <= 0 {
			return fmt.Errorf("%s: %w", d.field, ErrNotPositive)
		}
	}
	if c.Retention.InboxBodies < 0 {
		return fmt.Errorf("retention.inbox_bodies: %w", ErrNegative)
	}
	if c.Log.FlushInterval < 0 {
		return fmt.Errorf("log.flush_interval: %w", ErrNegative)
	}
	if c.Workers.Concurrency <= 0 {
		return fmt.Errorf("workers.concurrency: %w", ErrNotPositive)
	}

	seen := make(map[string]bool)
	for i, s := range c.Sources {
		field := fmt.Sprintf("sources[%d]", i)
		if err := validateName(seen, s.Name); err != nil {
			return fmt.Errorf("%s.name: %w", field, err)
		}
		if !slices.Contains(schemes, s.Scheme) {
			return fmt.Errorf("%s.scheme: %w", field, ErrInvalidScheme)
		}
		if len(s.Secrets) == 0 {
			return fmt.Errorf("%s.secrets: %w", field, ErrNoSecrets)
		}
		for j, secret := range s.Secrets {
			if secret == "" {
				return fmt.Errorf("%s.secrets[%d]: %w", field, j, ErrEmptySecret)
			}
		}
		// The scheme's own check of the secrets' form (a standard-webhooks secret is base64),
		// so that a bad secret stops startup instead of failing every delivery. It names the
		// secret by index, never by value.
		v := webhook.Verifier{Scheme: webhook.Scheme(s.Scheme), Secrets: s.Secrets}
		if err := v.Validate(); err != nil {
			return fmt.Errorf("%s.%w", field, err)
		}
		if s.Tolerance <= 0 {
			return fmt.Errorf("%s.tolerance: %w", field, ErrNotPositive)
		}
		if s.MaxBody < 0 {
			return fmt.Errorf("%s.max_body: %w", field, ErrNegative)
		}
		if len(s.Handlers) == 0 {
			// Without one, every event of the source would be stored and ignored.
			return fmt.Errorf("%s.handlers: %w", field, ErrRequired)
		}
		for j, h := range s.Handlers {
			if !slices.Contains(handlers, h) {
				return fmt.Errorf("%s.handlers[%d]: %w %q (known: %s)", field, j, ErrUnknownHandler, h, strings.Join(handlers, ", "))
			}
		}
	}

	if err := c.validateLimits(); err != nil {
		return err
	}

	if err := c.normalizePeople(); err != nil {
		return err
	}
	if err := c.Web.validate(); err != nil {
		return fmt.Errorf("web.%w", err)
	}
	if err := c.validateNotifications(); err != nil {
		return err
	}
	if err := c.validateSlack(); err != nil {
		return err
	}
	set, err := policy.Compile(c.Groups, c.Policies)
	if err != nil {
		return err
	}
	c.policies = set

	seen = make(map[string]bool)
	for i, a := range c.Actions {
		field := fmt.Sprintf("actions[%d]", i)
		if err := validateName(seen, a.Name); err != nil {
			return fmt.Errorf("%s.name: %w", field, err)
		}
		if !isHTTPURL(a.URL) {
			return fmt.Errorf("%s.url: %w", field, ErrInvalidURL)
		}
		if a.LookupURL != "" && !isHTTPURL(a.LookupURL) {
			return fmt.Errorf("%s.lookup_url: %w", field, ErrInvalidURL)
		}
		if a.Timeout < 0 {
			return fmt.Errorf("%s.timeout: %w", field, ErrNegative)
		}
		if a.MaxAttempts < 0 {
			return fmt.Errorf("%s.max_attempts: %w", field, ErrNegative)
		}
		if err := a.Backoff.validate(); err != nil {
			return fmt.Errorf("%s.backoff.%w", field, err)
		}
		if err := a.Policy().Validate(); err != nil {
			return fmt.Errorf("%s: %w", field, err)
		}
		if a.Secret != "" {
			// Outbound calls are signed the Standard Webhooks way.
			v := webhook.Verifier{Scheme: webhook.SchemeStandard, Secrets: []string{a.Secret}}
			if err := v.Validate(); err != nil {
				return fmt.Errorf("%s.secret: %w", field, ErrInvalidSecret)
			}
		}
	}
	return nil
}

// validateLimits checks the limits section against itself and the sources.
func (c *Config) validateLimits() error {
	l := c.Limits
	switch {
	case l.MaxConnections <= 0:
		return fmt.Errorf("limits.max_connections: %w", ErrNotPositive)
	case l.MaxInflightRequests <= 0:
		return fmt.Errorf("limits.max_inflight_requests: %w", ErrNotPositive)
	case l.MaxInflightRequests > l.MaxConnections:
		return fmt.Errorf("limits.max_inflight_requests: %w (%d)", ErrAboveConnections, l.MaxConnections)
	case l.MaxInflightBodyBytes <= 0:
		return fmt.Errorf("limits.max_inflight_body_bytes: %w", ErrNotPositive)
	}
	for i, s := range c.Sources {
		if maxBody := cmp.Or(s.MaxBody, DefaultSourceMaxBody); maxBody > l.MaxInflightBodyBytes {
			return fmt.Errorf("limits.max_inflight_body_bytes: %w: sources[%d].max_body is %d", ErrBelowMaxBody, i, maxBody)
		}
	}
	return nil
}

func (w WebConfig) validate() error {
	if w.PublicURL != "" && !isHTTPURL(w.PublicURL) {
		return fmt.Errorf("public_url: %w", ErrInvalidURL)
	}
	if w.SessionKey != "" && len(w.SessionKey) < 32 {
		return fmt.Errorf("session_key: %w", ErrShortKey)
	}
	if w.SessionTTL < 0 {
		return fmt.Errorf("session_ttl: %w", ErrNegative)
	}
	o := w.OIDC
	if o == nil {
		return nil
	}
	switch {
	case !isHTTPURL(o.Issuer):
		return fmt.Errorf("oidc.issuer: %w", ErrInvalidURL)
	case o.ClientID == "":
		return fmt.Errorf("oidc.client_id: %w", ErrRequired)
	case !isHTTPURL(o.RedirectURL):
		return fmt.Errorf("oidc.redirect_url: %w", ErrInvalidURL)
	}
	if o.SubjectClaim != "" && o.SubjectClaim != "sub" && o.SubjectClaim != "email" {
		return fmt.Errorf("oidc.subject_claim: %q %w", o.SubjectClaim, ErrInvalidClaim)
	}
	for i, d := range o.AllowedDomains {
		if d == "" || strings.ContainsAny(d, "@/ ") {
			return fmt.Errorf("oidc.allowed_domains[%d]: %w", i, ErrInvalidDomain)
		}
	}
	return nil
}

// Policy returns the action's retry policy, defaults filled in.
func (a ActionConfig) Policy() worker.Policy {
	p := worker.Policy{
		MaxAttempts: a.MaxAttempts,
		Idempotent:  a.Idempotent,
		HasLookup:   a.LookupURL != "",
		Backoff:     worker.Backoff(a.Backoff),
	}
	if p.MaxAttempts == 0 {
		p.MaxAttempts = worker.DefaultPolicy.MaxAttempts
	}
	def := worker.DefaultPolicy.Backoff
	if a.Backoff == (BackoffConfig{}) {
		p.Backoff = def
		return p
	}
	if p.Backoff.Initial == 0 {
		p.Backoff.Initial = def.Initial
	}
	if p.Backoff.Max == 0 {
		p.Backoff.Max = max(def.Max, p.Backoff.Initial)
	}
	if p.Backoff.Multiplier == 0 {
		p.Backoff.Multiplier = def.Multiplier
	}
	return p
}

// Target returns the execution runner's target for the action, the policy's defaults filled
// in (a zero Timeout is the runner's worker.DefaultTimeout).
func (a ActionConfig) Target() worker.Target {
	return worker.Target{
		Action:     a.Name,
		URL:        a.URL,
		Secret:     a.Secret,
		Idempotent: a.Idempotent,
		LookupURL:  a.LookupURL,
		Timeout:    a.Timeout,
		Async:      a.Async,
		Policy:     a.Policy(),
	}
}

// InboxBodyRetention returns how long processed inbox bodies are kept: InboxBodies, or
// InboxIDs when it is 0.
func (r RetentionConfig) InboxBodyRetention() time.Duration {
	if r.InboxBodies == 0 {
		return r.InboxIDs
	}
	return r.InboxBodies
}

func (b BackoffConfig) validate() error {
	switch {
	case b.Initial < 0:
		return fmt.Errorf("initial: %w: %w", ErrInvalidBackoff, ErrNegative)
	case b.Max < 0:
		return fmt.Errorf("max: %w: %w", ErrInvalidBackoff, ErrNegative)
	case b.Max != 0 && b.Max < b.Initial:
		return fmt.Errorf("max: %w: less than initial", ErrInvalidBackoff)
	case b.Multiplier != 0 && b.Multiplier < 1:
		return fmt.Errorf("multiplier: %w: must be at least 1", ErrInvalidBackoff)
	case b.Jitter < 0 || b.Jitter > 1:
		return fmt.Errorf("jitter: %w: must be between 0 and 1", ErrInvalidBackoff)
	}
	return nil
}

// Database kinds that ParseDatabaseURL recognises.
const (
	databaseSQLite   = "sqlite"
	databasePostgres = "postgres"
)

// ParseDatabaseURL tells which store a database URL names: postgres:// and postgresql:// are
// PostgreSQL; file:PATH and a bare path are SQLite. The returned kind is databaseSQLite or
// databasePostgres.
func ParseDatabaseURL(s string) (kind string, err error) {
	switch {
	case s == "":
		return "", ErrRequired
	case strings.HasPrefix(s, "postgres://"), strings.HasPrefix(s, "postgresql://"):
		return databasePostgres, nil
	case strings.HasPrefix(s, "file:"):
		return databaseSQLite, nil
	case strings.Contains(s, "://"):
		return "", ErrInvalidDBURL // another scheme: refuse rather than make a file named after it
	}
	return databaseSQLite, nil
}

// validName is what a source or action name may look like: it appears in URL paths.
var validName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

func validateName(seen map[string]bool, name string) error {
	if name == "" {
		return ErrRequired
	} else if !validName.MatchString(name) {
		return fmt.Errorf("%q: %w", name, ErrInvalidName)
	} else if seen[name] {
		return fmt.Errorf("%q: %w", name, ErrDuplicateName)
	}
	seen[name] = true
	return nil
}

func isHTTPURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// envName is a reference os.Expand hands to the mapping that names a variable; anything else
// ($$, $1, a lone $) is shell syntax that has no meaning here and is kept as written.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// expandEnv replaces ${NAME} and $NAME with the environment variable's value. Every unset
// variable is reported, so that one run shows all that are missing.
func expandEnv(text string) (string, error) {
	var missing []string
	out := os.Expand(text, func(name string) string {
		if !envName.MatchString(name) {
			return "$" + name
		}
		v, ok := os.LookupEnv(name)
		if !ok && !slices.Contains(missing, name) {
			missing = append(missing, name)
		}
		return v
	})
	if len(missing) > 0 {
		sort.Strings(missing)
		return "", fmt.Errorf("config references unset environment variable %s", strings.Join(missing, ", "))
	}
	return out, nil
}

// normalizePeople puts every name of a person the configuration holds in its normalised form
// (approval.NormalizeName), as tokens and approvals store them, so that "Alice" in people is
// the approver alice: people, notifications.operators, callbacks.requesters and the operators
// and admins of web.oidc and web.signin_links. A name that could pass for another is refused,
// naming the field and the character.
func (c *Config) normalizePeople() error {
	one := func(field string, name *string) error {
		if *name == "" {
			return nil // the section's own check says it is required
		}
		n, err := approval.NormalizeName(field, *name)
		if err != nil {
			return fmt.Errorf("%s: %w: %s", field, ErrInvalidPerson, approval.ErrorMessage(err))
		}
		*name = n
		return nil
	}
	list := func(field string, names []string) error {
		for i := range names {
			if err := one(fmt.Sprintf("%s[%d]", field, i), &names[i]); err != nil {
				return err
			}
		}
		return nil
	}
	for i := range c.People {
		if err := one(fmt.Sprintf("people[%d].name", i), &c.People[i].Name); err != nil {
			return err
		}
	}
	for i := range c.Callbacks.Requesters {
		if err := one(fmt.Sprintf("callbacks.requesters[%d].name", i), &c.Callbacks.Requesters[i].Name); err != nil {
			return err
		}
	}
	if err := list("notifications.operators", c.Notifications.Operators); err != nil {
		return err
	}
	if o := c.Web.OIDC; o != nil {
		if err := list("web.oidc.operators", o.Operators); err != nil {
			return err
		}
		if err := list("web.oidc.admins", o.Admins); err != nil {
			return err
		}
	}
	if l := c.Web.SigninLinks; l != nil {
		if err := list("web.signin_links.operators", l.Operators); err != nil {
			return err
		}
		if err := list("web.signin_links.admins", l.Admins); err != nil {
			return err
		}
	}
	return nil
}
