package postgres

import (
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/batch"
	"github.com/approvald/approval/internal/sqldb"
)

// ExecutionClaimSQL is the execution claim's statement: $1 now, $2 the limit, $3 the lease's
// end.
const ExecutionClaimSQL = executionClaimSQL

// SetListenTimes shortens how long the LISTEN connection may stay quiet before it is pinged,
// and how long the ping may take, so that a test can see a silently dropped connection
// replaced. Call it before the first Subscribe.
func (s *Store) SetListenTimes(idle, pingTimeout time.Duration) {
	s.notifier.idle, s.notifier.pingTimeout = idle, pingTimeout
}

// AcquiredConns is how many of the store's connections (both pools) are in use.
func (s *Store) AcquiredConns() int32 {
	return s.pool.Stat().AcquiredConns() + s.batchPool.Stat().AcquiredConns()
}

// OpenCounting opens a store whose connections count their round trips to the server.
func OpenCounting(ctx context.Context, url string) (*Store, *RoundTrips, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, nil, err
	}
	rt := &RoundTrips{}
	var d net.Dialer
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &countingConn{Conn: c, rt: rt}, nil
	}
	s, err := openConfig(ctx, cfg)
	return s, rt, err
}

// RoundTrips counts exchanges with the server over every connection of a store: a write
// that follows a read (or is a connection's first) starts a new round trip, however many
// statements it carries.
type RoundTrips struct{ n atomic.Int64 }

// Count is the number of round trips so far.
func (r *RoundTrips) Count() int64 { return r.n.Load() }

type countingConn struct {
	net.Conn
	rt      *RoundTrips
	mu      sync.Mutex
	writing bool
}

func (c *countingConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	if !c.writing {
		c.writing = true
		c.rt.n.Add(1)
	}
	c.mu.Unlock()
	return c.Conn.Write(b)
}

func (c *countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.mu.Lock()
		c.writing = false
		c.mu.Unlock()
	}
	return n, err
}

// BatchOutcome is a create's outcome in a batch InsertBatch ran: Err, or refused, written,
// or the holder of its key.
type BatchOutcome struct {
	Refused, Written bool
	Holder           *approval.Approval
	Err              error
}

// InsertBatch runs the creates as ONE batch of InsertApproval's batcher, as if they had
// arrived together, each with its token check (nil: none).
func (s *Store) InsertBatch(as []*approval.Approval, checks []*approval.TokenCheck) []BatchOutcome {
	calls := make([]*batch.Call[insert, inserted], len(as))
	for i, a := range as {
		calls[i] = &batch.Call[insert, inserted]{Req: insert{a: a, cause: []byte(`{}`), check: checks[i]}}
	}
	eachAlone(s.insertBatch)(calls)
	out := make([]BatchOutcome, len(calls))
	for i, c := range calls {
		out[i] = BatchOutcome{Refused: c.Res.refused, Written: c.Res.written, Err: c.Err}
		if c.Res.holder != nil {
			out[i].Holder = c.Res.holder.Approval
		}
	}
	return out
}

// RecordInboxBatch stores the deliveries as ONE batch of RecordInbox's batcher, and returns
// whether each was stored, or its error.
func (s *Store) RecordInboxBatch(es []*approval.InboxEvent) ([]bool, []error) {
	calls := make([]*batch.Call[*approval.InboxEvent, recorded], len(es))
	for i, e := range es {
		calls[i] = &batch.Call[*approval.InboxEvent, recorded]{Req: e}
	}
	eachAlone(s.recordInboxBatch)(calls)
	stored, errs := make([]bool, len(calls)), make([]error, len(calls))
	for i, c := range calls {
		stored[i], errs[i] = c.Res.stored, translate("record inbox event", c.Err)
	}
	return stored, errs
}

// ReadBatch reads the ids as ONE batch of Approval's batcher, each with its token check
// (nil: none), and returns each approval read, or nil.
func (s *Store) ReadBatch(ids []string, checks []*approval.TokenCheck) ([]*approval.Approval, error) {
	calls := make([]*batch.Call[read, *approval.Approval], len(ids))
	for i, id := range ids {
		calls[i] = &batch.Call[read, *approval.Approval]{Req: read{id: id, check: checks[i]}}
	}
	eachAlone(s.readBatch)(calls)
	out := make([]*approval.Approval, len(calls))
	for i, c := range calls {
		if c.Err != nil {
			return nil, c.Err
		}
		out[i] = c.Res
	}
	return out, nil
}

// BatchConn is one of the connections the store's batches run on, for a test that looks at
// how their sessions plan.
func (s *Store) BatchConn(ctx context.Context) (*pgxpool.Conn, error) {
	return s.batchPool.Acquire(ctx)
}

// PoolConn is one of the connections of the store's pool.
func (s *Store) PoolConn(ctx context.Context) (*pgxpool.Conn, error) {
	return s.pool.Acquire(ctx)
}

// BatchStatements are the statements the batches run, by name.
var BatchStatements = map[string]string{
	"insert_approvals": insertApprovalsSQL,
	"held_approvals":   heldApprovalsSQL,
	"read_approvals":   readApprovalsSQL,
	"insert_inbox":     insertInboxSQL,
	"signal_inbox":     signalStoredInboxSQL,
}

// TokenBatch looks the hashes up as ONE batch of TokenByHash's batcher and returns each token
// found, or nil.
func (s *Store) TokenBatch(hashes [][]byte) ([]*approval.Token, error) {
	calls := make([]*batch.Call[[]byte, *approval.Token], len(hashes))
	for i, h := range hashes {
		calls[i] = &batch.Call[[]byte, *approval.Token]{Req: h}
	}
	eachAlone(s.tokenBatch)(calls)
	out := make([]*approval.Token, len(calls))
	for i, c := range calls {
		if c.Err != nil {
			return nil, c.Err
		}
		out[i] = c.Res
	}
	return out, nil
}

// SettleSignals sends at once the inbox signal the store's gate owes, if any, and waits for
// a send under way, so that no signal of an earlier intake lands in a later count.
func (s *Store) SettleSignals() {
	g := s.inboxSignals
	g.mu.Lock()
	if g.armed {
		g.stop()
		g.armed = false
	}
	owed := g.owed
	g.owed = false
	if owed {
		g.last = g.now()
		g.sending.Add(1)
	}
	g.mu.Unlock()
	if owed {
		g.send()
		g.sending.Done()
	}
	g.sending.Wait()
}

// SetIncarnation overwrites the incarnation the store keeps, as if its newest connection had
// reached another server, so that a test can see the next connection read it again.
func (s *Store) SetIncarnation(inc string) { s.incarnation.Store(&inc) }

// Failover moves a store opened by OpenFailover to another schema of the same server, as a
// failover would move it to another server: one that lacks what the first one held, and
// whose incarnation differs. (A server's real incarnation cannot be changed by a test: the
// fake one is the real one with the schema's name after it.)
type Failover struct {
	store  *Store
	schema atomic.Pointer[string] // the schema new connections use; nil: the URL's
}

// OpenFailover opens a store on url whose connections can be moved by the Failover.
func OpenFailover(ctx context.Context, url string) (*Store, *Failover, error) {
	cfg, err := parseConfig(url)
	if err != nil {
		return nil, nil, err
	}
	f := &Failover{}
	cfg.BeforeConnect = func(_ context.Context, c *pgx.ConnConfig) error {
		if schema := f.schema.Load(); schema != nil {
			c.RuntimeParams["search_path"] = *schema
		}
		return nil
	}
	cfg.AfterConnect = func(context.Context, *pgx.Conn) error {
		if schema := f.schema.Load(); schema != nil {
			f.store.SetIncarnation(f.store.Incarnation() + " " + *schema)
		}
		return nil
	}
	s, err := openConfig(ctx, cfg)
	f.store = s
	return s, f, err
}

// To moves the store's new connections to schema, and closes its connections to the other:
// idle ones at once, those in use when they are released.
func (f *Failover) To(schema string) {
	f.schema.Store(&schema)
	f.store.pool.Reset()
	f.store.batchPool.Reset()
}

// ExplainApprovals plans and runs, on conn, the statement Approvals sends for f, with
// EXPLAIN (ANALYZE, BUFFERS, COSTS OFF), and returns the plan.
func ExplainApprovals(ctx context.Context, conn *pgx.Conn, f approval.ApprovalFilter) (string, error) {
	e := &explainer{conn: conn}
	r := sqldb.Reads{DB: e, Dialect: dialect, Clock: time.Now, Translate: translate}
	if _, _, err := r.Approvals(ctx, f); err != nil {
		return "", err
	}
	return e.plan, e.err
}

// explainer is a sqldb.Querier that explains the statement instead of running it for rows.
type explainer struct {
	conn *pgx.Conn
	plan string
	err  error
}

func (e *explainer) Query(ctx context.Context, sql string, args ...any) (sqldb.Rows, error) {
	rows, err := e.conn.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) "+sql, args...)
	if err != nil {
		return nil, err
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	e.plan, e.err = strings.Join(lines, "\n"), err
	return sqldb.EmptyRows{}, nil
}
