package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/signal"
)

// channelSQL is the name of a topic's channel on this store's schema, topic being the SQL of
// the topic's name: both sides compute it with this one expression (docs/architecture.md,
// "Signals after the commit").
func channelSQL(topic string) string {
	return `'approvald_' || ` + topic + ` || '_' || left(md5(current_schema()), 16)`
}

// topics are the topics a Store signals and listens for. The listener's tests find it by its
// last statement, a LISTEN on executions' channel: that topic stays last.
var topics = []string{approval.TopicApprovals, approval.TopicInbox, approval.TopicOutbox, approval.TopicExecutions}

// signalSQL signals the topics in $1 (a text[]) to every replica's subscribers, a topic
// "T/K" on T's channel with the key K as the payload. It is sent right behind a write's
// COMMIT, in the same round trip, as a transaction of its own that commits with
// synchronous_commit off, never inside the write's (docs/architecture.md, "Signals after the
// commit").
var signalSQL = `SELECT count(pg_notify(` + channelSQL(`split_part(topic, '/', 1)`) + `,
		substr(topic, length(split_part(topic, '/', 1)) + 2)))
	FROM unnest($1::text[]) AS topic, set_config('synchronous_commit', 'off', true)`

// Subscribe returns a channel that receives a value (coalesced, buffered 1) after each
// committed change on topic by any store on this schema (topic may name a key, as
// approval.TopicApproval does), and a function that ends the subscription. The first call
// starts the store's LISTEN connection, and every subscriber is signalled whenever that
// connection is (re)established (docs/architecture.md, "Signals after the commit"). Close
// closes every subscription's channel.
func (s *Store) Subscribe(topic string) (<-chan struct{}, func()) {
	return s.notifier.Subscribe(topic)
}

// How long the LISTEN connection may stay quiet before it is pinged, and how long the ping
// may take.
const (
	listenIdle        = 30 * time.Second
	listenPingTimeout = 10 * time.Second
)

// notifier is the session of the store's signal.Feed: one dedicated LISTEN connection, not
// from the pool, whose notifications it signals to the subscribers of this process.
type notifier struct {
	*signal.Feed
	config *pgx.ConnConfig
	// idle and pingTimeout are listenIdle and listenPingTimeout; tests shorten them.
	idle, pingTimeout time.Duration
}

func newNotifier(config *pgx.ConnConfig, logger func() *slog.Logger) *notifier {
	config = config.Copy()
	if config.RuntimeParams == nil {
		config.RuntimeParams = make(map[string]string)
	}
	if config.RuntimeParams["application_name"] == "" {
		// So that an operator can tell it apart in pg_stat_activity: it is idle by design.
		config.RuntimeParams["application_name"] = "approvald listener"
	}
	n := &notifier{config: config, idle: listenIdle, pingTimeout: listenPingTimeout}
	n.Feed = signal.NewFeed(n.session, func(err error, backoff time.Duration) {
		logger().Warn("postgres notifier: listen connection lost, reconnecting", "error", err, "backoff", backoff)
	})
	return n
}

// session connects, listens on every topic's channel and delivers notifications until the
// connection fails or ctx ends. connected is called once the LISTENs are in place.
func (n *notifier) session(ctx context.Context, connected func()) error {
	conn, err := pgx.ConnectConfig(ctx, n.config.Copy())
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer func() {
		// ctx may be over; closing needs a context of its own to say goodbye.
		closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		conn.Close(closeCtx)
	}()

	byChannel := make(map[string]string, len(topics))
	for _, topic := range topics {
		var channel string
		if err := conn.QueryRow(ctx, `SELECT `+channelSQL(`$1::text`), topic).Scan(&channel); err != nil {
			return fmt.Errorf("name channel of %s: %w", topic, err)
		}
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
			return fmt.Errorf("listen on %s: %w", channel, err)
		}
		byChannel[channel] = topic
	}
	connected()
	// Whatever changed while no connection listened went unheard: wake everyone to look.
	n.Signal(topics...)

	for {
		waitCtx, cancel := context.WithTimeout(ctx, n.idle)
		note, err := conn.WaitForNotification(waitCtx)
		idle := waitCtx.Err() != nil
		cancel()
		switch {
		case err == nil:
			if topic, ok := byChannel[note.Channel]; ok {
				if note.Payload != "" {
					topic += "/" + note.Payload
				}
				n.Signal(topic)
			}
		case ctx.Err() != nil:
			return ctx.Err()
		case idle:
			// After a quiet spell, make sure the server still answers (docs/operations.md,
			// "PostgreSQL's connections"). pgx keeps a connection whose wait timed out usable.
			pingCtx, cancel := context.WithTimeout(ctx, n.pingTimeout)
			err := conn.Ping(pingCtx)
			cancel()
			if err != nil {
				return fmt.Errorf("ping after %v without notifications: %w", n.idle, err)
			}
		default:
			return fmt.Errorf("wait for notification: %w", err)
		}
	}
}
