package postgres_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/testdb"
	"github.com/approvald/approval/internal/wait"
	"github.com/approvald/approval/postgres"
)

// These tests run several Store values on one schema, as replicas of approvald do on one
// database: what one commits must wake and bind the others through PostgreSQL alone.

// signalWait bounds how long a test waits for a signal that must come. It is a failure
// deadline, not a pause: a passing test never waits it out.
const signalWait = 10 * time.Second

func TestNotifyWakesAnotherStore(t *testing.T) {
	t.Parallel()
	dsn := testdb.DSN(t, testdb.Postgres)
	writer, listener := mustOpen(t, dsn), mustOpen(t, dsn)
	if err := writer.Migrate(t.Context()); err != nil {
		t.Fatalf("migrate: %v", err)
	}

	inbox, stop := listener.Subscribe(approval.TopicInbox)
	defer stop()
	mustSignal(t, inbox, "the listen connection's first signal")

	for i := range 3 {
		e := inboxEvent(fmt.Sprintf("evt-%d", i), time.Now())
		if dup, err := writer.RecordInbox(t.Context(), e); err != nil || dup {
			t.Fatalf("record inbox event %d: got (%v, %v), want (false, nil)", i, dup, err)
		}
		mustSignal(t, inbox, fmt.Sprintf("inbox event %d recorded by another store", i))
	}
}

func TestNotifyIsPerSchema(t *testing.T) {
	t.Parallel()
	here, there := testdb.DSN(t, testdb.Postgres), testdb.DSN(t, testdb.Postgres)
	listener := mustOpen(t, here)
	other := mustOpen(t, there)
	if err := other.Migrate(t.Context()); err != nil {
		t.Fatalf("migrate: %v", err)
	}

	// The channel names differ by schema, so the LISTEN of one schema's store cannot hear
	// another's NOTIFY: compare the channels both listen connections are on.
	inbox, stop := listener.Subscribe(approval.TopicExecutions)
	defer stop()
	mustSignal(t, inbox, "the listen connection's first signal")
	otherInbox, stopOther := other.Subscribe(approval.TopicExecutions)
	defer stopOther()
	mustSignal(t, otherInbox, "the other listen connection's first signal")

	a, b := listenChannel(t, here, approval.TopicExecutions), listenChannel(t, there, approval.TopicExecutions)
	if a == b {
		t.Fatalf("schemas %s and %s: both listen on %q, want different channels", schemaOf(t, here), schemaOf(t, there), a)
	}
	for _, ch := range []string{a, b} {
		if !listening(t, ch) {
			t.Errorf("no backend is listening on %q", ch)
		}
	}
}

// A NOTIFY on the approvals channel carries the approval's id: it wakes that approval's
// subscribers and the whole topic's, not another approval's. One without an id (a replica
// that does not know it, or an older version) wakes them all. Another connection sends the
// NOTIFYs, as another replica would; one session's notifications arrive in order, so once a
// later one is heard an earlier one has been delivered.
func TestNotifyCarriesTheApprovalID(t *testing.T) {
	t.Parallel()
	dsn := testdb.DSN(t, testdb.Postgres)
	listener := mustOpen(t, dsn)
	if err := listener.Migrate(t.Context()); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	onA, stopA := listener.Subscribe(approval.TopicApproval("apr_a"))
	defer stopA()
	onB, stopB := listener.Subscribe(approval.TopicApproval("apr_b"))
	defer stopB()
	onAll, stopAll := listener.Subscribe(approval.TopicApprovals)
	defer stopAll()
	mustSignal(t, onAll, "the listen connection's first signal")
	mustSignal(t, onA, "the listen connection's first signal, to A's subscriber")
	mustSignal(t, onB, "the listen connection's first signal, to B's subscriber")

	channel := listenChannel(t, dsn, approval.TopicApprovals)
	conn := mustConnect(t)
	notify := func(payload string) {
		t.Helper()
		if _, err := conn.Exec(t.Context(), `SELECT pg_notify($1, $2)`, channel, payload); err != nil {
			t.Fatalf("notify %q: %v", payload, err)
		}
	}

	notify("apr_b")
	mustSignal(t, onB, "B's change, to B's subscriber")
	mustSignal(t, onAll, "B's change, to the whole topic's subscriber")
	select {
	case <-onA:
		t.Fatal("A's subscriber: woken by B's change, want not")
	default:
	}
	notify("apr_a")
	mustSignal(t, onA, "A's change, to A's subscriber")
	mustSignal(t, onAll, "A's change, to the whole topic's subscriber")
	select {
	case <-onB:
		t.Fatal("B's subscriber: woken by A's change, want not")
	default:
	}

	notify("")
	for name, ch := range map[string]<-chan struct{}{"A": onA, "B": onB, "all": onAll} {
		mustSignal(t, ch, "a change without an id, to the subscriber of "+name)
	}
}

func TestNotifierReconnects(t *testing.T) {
	t.Parallel()
	dsn := testdb.DSN(t, testdb.Postgres)
	writer, listener := mustOpen(t, dsn), mustOpen(t, dsn)
	listener.Logger = slog.New(slog.NewTextHandler(io.Discard, nil)) // the loss it reports is this test's doing
	if err := writer.Migrate(t.Context()); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	inbox, stop := listener.Subscribe(approval.TopicInbox)
	defer stop()
	one, stopOne := listener.Subscribe(approval.TopicApproval("apr_one"))
	defer stopOne()
	mustSignal(t, inbox, "the listen connection's first signal")
	mustSignal(t, one, "the listen connection's first signal, to one approval's subscriber")

	// Kill the listen connection from the server side, as a failover or an idle timeout would.
	channel := listenChannel(t, dsn, approval.TopicExecutions)
	conn := mustConnect(t)
	var killed bool
	if err := conn.QueryRow(t.Context(), `
		SELECT coalesce(bool_or(pg_terminate_backend(pid)), false) FROM pg_stat_activity
		WHERE query = 'LISTEN "' || $1 || '"'`,
		channel).Scan(&killed); err != nil || !killed {
		t.Fatalf("terminate the listen connection: got (%v, %v), want (true, nil)", killed, err)
	}

	// Changes made while nobody listened are not heard, so the new connection wakes everyone.
	mustSignal(t, inbox, "the signal of the re-established listen connection")
	mustSignal(t, one, "the signal of the re-established listen connection, to one approval's subscriber")
	if _, err := writer.RecordInbox(t.Context(), inboxEvent("after-reconnect", time.Now())); err != nil {
		t.Fatalf("record inbox event: %v", err)
	}
	mustSignal(t, inbox, "an inbox event recorded after the reconnect")
}

func TestNotifierReplacesASilentlyDroppedConnection(t *testing.T) {
	t.Parallel()
	dsn := testdb.DSN(t, testdb.Postgres)
	writer := mustOpen(t, dsn)
	if err := writer.Migrate(t.Context()); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	// The listener reaches the server through a proxy that can stop passing bytes without
	// closing anything, as a NAT or a load balancer that forgets a connection does.
	proxy := startProxy(t, hostOf(t, dsn))
	listener := mustOpen(t, withHost(t, dsn, proxy.addr()))
	listener.Logger = slog.New(slog.NewTextHandler(io.Discard, nil)) // the loss it reports is this test's doing
	listener.SetListenTimes(100*time.Millisecond, 100*time.Millisecond)

	inbox, stop := listener.Subscribe(approval.TopicInbox)
	defer stop()
	mustSignal(t, inbox, "the listen connection's first signal")
	proxy.blackhole()

	// No error ever reaches the listener; only its idle ping finds the connection dead.
	mustSignal(t, inbox, "the signal of the replacement listen connection")
	if _, err := writer.RecordInbox(t.Context(), inboxEvent("after-blackhole", time.Now())); err != nil {
		t.Fatalf("record inbox event: %v", err)
	}
	mustSignal(t, inbox, "an inbox event recorded after the replacement")
}

func TestCloseStopsListening(t *testing.T) {
	t.Parallel()
	dsn := testdb.DSN(t, testdb.Postgres)
	s, err := postgres.Open(t.Context(), dsn)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	ch, stop := s.Subscribe(approval.TopicApprovals)
	mustSignal(t, ch, "the listen connection's first signal")
	channel := listenChannel(t, dsn, approval.TopicExecutions)
	if !listening(t, channel) {
		t.Fatalf("no backend is listening on %q", channel)
	}

	// Close returns only after the listen goroutine has closed its connection.
	if err := s.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	stop()
	stop() // ending a subscription twice is harmless
	conn := mustConnect(t)
	// The server ends the backend just after the client's goodbye; give it that moment.
	wait.Until(t, fmt.Sprintf("no backend to listen on %q after Close", channel), func() bool { return !listeningOn(t, conn, channel) })

	// A subscription to a closed store gets a closed channel, not a panic or a new connection.
	late, stopLate := s.Subscribe(approval.TopicInbox)
	defer stopLate()
	select {
	case _, ok := <-late:
		if ok {
			t.Fatal("subscription after Close: got a signal, want a closed channel")
		}
	default:
		t.Fatal("subscription after Close: channel open, want it closed")
	}
}

func TestClaimInboxAcrossStores(t *testing.T) {
	t.Parallel()
	const events, replicas = 200, 4
	dsn := testdb.DSN(t, testdb.Postgres)
	now := func() time.Time { return start }
	stores := make([]*postgres.Store, replicas)
	for i := range stores {
		stores[i] = mustOpen(t, dsn)
		stores[i].Now = now
	}
	if err := stores[0].Migrate(t.Context()); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	for i := range events {
		if _, err := stores[i%replicas].RecordInbox(t.Context(), inboxEvent(fmt.Sprintf("evt-%03d", i), start)); err != nil {
			t.Fatalf("record inbox event %d: %v", i, err)
		}
	}

	claimed := make([][]string, replicas)
	errs := make([]error, replicas)
	race(replicas, func(i int) {
		for {
			got, err := (&approval.Service{Store: stores[i]}).ClaimInbox(context.Background(), time.Hour, 7)
			if err != nil {
				errs[i] = err
				return
			}
			if len(got) == 0 {
				return
			}
			for _, e := range got {
				claimed[i] = append(claimed[i], e.EventID)
			}
		}
	})
	mustClaimEachOnce(t, "inbox event", events, claimed, errs)
}

func TestClaimExecutionsAcrossStores(t *testing.T) {
	t.Parallel()
	const executions, replicas = 200, 4
	dsn := testdb.DSN(t, testdb.Postgres)
	now := func() time.Time { return start }
	stores := make([]*postgres.Store, replicas)
	for i := range stores {
		stores[i] = mustOpen(t, dsn)
		stores[i].Now = now
	}
	if err := stores[0].Migrate(t.Context()); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	for i := range executions {
		if a := mustApprove(t, stores[i%replicas]); a.Execution == nil || a.Execution.Status != approval.ExecutionQueued {
			t.Fatalf("approve %d: got execution %+v, want queued", i, a.Execution)
		}
	}

	claimed := make([][]string, replicas)
	errs := make([]error, replicas)
	race(replicas, func(i int) {
		for {
			got, err := (&approval.Service{Store: stores[i]}).ClaimExecutions(context.Background(), time.Hour, 7)
			if err != nil {
				errs[i] = err
				return
			}
			if len(got) == 0 {
				return
			}
			for _, c := range got {
				if c.Attempt != 1 || c.Recovered || c.Approval == nil || c.Approval.ID != c.Record.ApprovalID {
					errs[i] = fmt.Errorf("claim of %s: got attempt %d, recovered %v, approval %v; want attempt 1 of its approval, not recovered", c.Record.ID, c.Attempt, c.Recovered, c.Approval)
					return
				}
				claimed[i] = append(claimed[i], c.Record.ID)
			}
		}
	})
	mustClaimEachOnce(t, "execution", executions, claimed, errs)
}

// start is the fixed clock of the claim races: nothing expires while they run.
var start = time.Date(2030, time.January, 2, 3, 4, 5, 0, time.UTC)

// mustClaimEachOnce checks that the replicas between them claimed want distinct items, none
// twice, and failed nowhere.
func mustClaimEachOnce(tb testing.TB, what string, want int, claimed [][]string, errs []error) {
	tb.Helper()
	for i, err := range errs {
		if err != nil {
			tb.Fatalf("replica %d: claim %ss: %v", i, what, err)
		}
	}
	by := make(map[string]int)
	total := 0
	for i, ids := range claimed {
		total += len(ids)
		for _, id := range ids {
			if j, ok := by[id]; ok {
				tb.Errorf("%s %s claimed by replicas %d and %d, want one claim", what, id, j, i)
			}
			by[id] = i
		}
		tb.Logf("replica %d claimed %d %ss", i, len(ids), what)
	}
	if total != want || len(by) != want {
		tb.Fatalf("claimed %d %ss (%d distinct), want each of %d exactly once", total, what, len(by), want)
	}
}

// mustApprove creates an approval as httpapi does and approves it, its action having a
// target; it returns the approval as Decide answered.
func mustApprove(tb testing.TB, s *postgres.Store) *approval.Approval {
	tb.Helper()
	ctx := tb.Context()
	key := approval.NewID("op")
	a, err := approval.NewApproval(approval.CreateRequest{
		Action: "payout", Title: "Pay out order 9281", Approvers: []string{"alice"},
	}, "ci-bot", key, "fp-"+key, s.Now())
	if err != nil {
		tb.Fatalf("new approval: %v", err)
	}
	if h, err := s.InsertApproval(ctx, a, approval.HTTPCause("create"), nil); err != nil || h != nil {
		tb.Fatalf("create approval: got holder %+v, error %v, want neither", h, err)
	}
	approved, err := (&approval.Service{Store: s, Targeted: func(string) bool { return true }}).Decide(ctx, approval.Principal{Subject: "alice", Role: approval.RoleAdmin}, approval.DecideRequest{ApprovalID: a.ID, Approver: "alice", Verdict: approval.VerdictApprove, Cause: approval.HTTPCause("approve")})
	if err != nil {
		tb.Fatalf("approve %s: %v", a.ID, err)
	}
	return approved
}

func inboxEvent(eventID string, at time.Time) *approval.InboxEvent {
	return &approval.InboxEvent{
		ID: approval.NewID("inb"), Source: "chat", EventID: eventID, Type: approval.TypeApprovalDecision,
		Headers: map[string]string{"webhook-id": eventID}, Body: []byte(`{"id":"` + eventID + `"}`),
		ReceivedAt: at,
	}
}

// mustSignal waits for one signal on ch.
func mustSignal(tb testing.TB, ch <-chan struct{}, what string) {
	tb.Helper()
	select {
	case <-ch:
	case <-time.After(signalWait):
		tb.Fatalf("no signal for %s within %v", what, signalWait)
	}
}

// listenChannel returns the NOTIFY channel of topic for the schema of dsn, computed as the
// store does (approvald_<topic>_<first 16 hex digits of md5(schema)>).
func listenChannel(tb testing.TB, dsn, topic string) string {
	tb.Helper()
	var channel string
	if err := mustConnect(tb).QueryRow(tb.Context(), `SELECT 'approvald_' || $1::text || '_' || left(md5($2), 16)`,
		topic, schemaOf(tb, dsn)).Scan(&channel); err != nil {
		tb.Fatalf("name channel: %v", err)
	}
	return channel
}

// listening reports whether some backend's last statement was LISTEN on channel. The listen
// connection issues one LISTEN per topic, executions last, and then only waits, so this finds
// it by the executions channel.
func listening(tb testing.TB, channel string) bool {
	tb.Helper()
	return listeningOn(tb, mustConnect(tb), channel)
}

func listeningOn(tb testing.TB, conn *pgx.Conn, channel string) bool {
	tb.Helper()
	var n int
	if err := conn.QueryRow(tb.Context(), `
		SELECT count(*) FROM pg_stat_activity WHERE query = 'LISTEN "' || $1 || '"'`,
		channel).Scan(&n); err != nil {
		tb.Fatalf("look for listeners: %v", err)
	}
	return n > 0
}

func schemaOf(tb testing.TB, dsn string) string {
	tb.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		tb.Fatalf("parse dsn: %v", err)
	}
	return u.Query().Get("search_path")
}

// mustConnect opens a plain connection to the test server, closed when the test ends.
func mustConnect(tb testing.TB) *pgx.Conn {
	tb.Helper()
	conn, err := pgx.Connect(context.Background(), testdb.PostgresURL(tb))
	if err != nil {
		tb.Fatalf("connect: %v", err)
	}
	tb.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// proxy forwards TCP connections to a server until blackhole makes the connections open so
// far swallow everything in both directions while staying open.
type proxy struct {
	ln     net.Listener
	mu     sync.Mutex
	frozen []*atomic.Bool // one per connection pair accepted so far
}

func startProxy(tb testing.TB, target string) *proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("proxy listen: %v", err)
	}
	p := &proxy{ln: ln}
	var wg sync.WaitGroup
	var conns []net.Conn
	tb.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		p.mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return // closed by the cleanup
			}
			server, err := net.Dial("tcp", target)
			if err != nil {
				client.Close()
				continue
			}
			frozen := new(atomic.Bool)
			p.mu.Lock()
			conns = append(conns, client, server)
			p.frozen = append(p.frozen, frozen)
			p.mu.Unlock()
			wg.Go(func() { pipe(server, client, frozen) })
			wg.Go(func() { pipe(client, server, frozen) })
		}
	})
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range p.frozen {
		f.Store(true)
	}
}

// pipe copies src to dst, dropping what it reads once frozen, until either side closes.
func pipe(dst, src net.Conn, frozen *atomic.Bool) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			return
		}
		if frozen.Load() {
			continue
		}
		if _, err := dst.Write(buf[:n]); err != nil {
			return
		}
	}
}

func hostOf(tb testing.TB, dsn string) string {
	tb.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		tb.Fatalf("parse dsn: %v", err)
	}
	return u.Host
}

func withHost(tb testing.TB, dsn, host string) string {
	tb.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		tb.Fatalf("parse dsn: %v", err)
	}
	u.Host = host
	return u.String()
}
