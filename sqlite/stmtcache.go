package sqlite

import (
	"container/list"
	"context"
	"database/sql/driver"
)

// stmtCacheSize is how many prepared statements each connection keeps. The store runs a few
// dozen distinct statements; the rest of the room is for the ones whose text varies with
// their arguments (a list of ids, a batch of rows), the least recently used going first.
const stmtCacheSize = 128

// cachingConnector opens connections that keep the statements they prepared
// (docs/architecture.md, "Inside the SQLite driver"). The driver prepares a statement for
// every call not made on a prepared statement and finalizes it after: parsing and planning
// SQL would be a large share of a create's and a GET's CPU. A cachingConnector's connections
// keep their statements by text and run each call on the one already prepared, as
// PostgreSQL's driver does with its statement cache.
//
// Only statements with arguments are kept: those are the ones the store runs over and over;
// one without (a migration's script, a pragma, a ping) is prepared and finalized each time.
//
// The cache lives in the connection, below database/sql, because a SQLite statement belongs
// to its connection, and because database/sql can only prepare a statement for a pool by
// taking a connection of its own, which a write transaction holding the write pool's one
// connection would wait for forever.
type cachingConnector struct{ driver.Connector }

func (c cachingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	inner, ok := conn.(innerConn)
	if !ok {
		return conn, nil // a driver without the context methods: run it as it is
	}
	return &cachingConn{innerConn: inner, stmts: make(map[string]*list.Element)}, nil
}

// innerConn is what cachingConn needs of the driver's connection, and passes on.
type innerConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
	driver.SessionResetter
	driver.Validator
}

// cachingConn is a connection that keeps up to stmtCacheSize prepared statements.
// database/sql uses a connection from one goroutine at a time, rows' Close included, so it
// needs no lock of its own.
type cachingConn struct {
	innerConn
	stmts map[string]*list.Element // of *cachedStmt, by text
	lru   list.List                // the most recently used first
}

// ctxStmt is what cachingConn needs of the driver's prepared statement.
type ctxStmt interface {
	driver.Stmt
	driver.StmtExecContext
	driver.StmtQueryContext
}

// cachedStmt is a prepared statement in a connection's cache.
type cachedStmt struct {
	query string
	stmt  ctxStmt
	// busy is set while rows of the statement are open: a second use of the same text then
	// runs unprepared, since running the statement again would reset the open rows. dropped
	// is set when the statement left the cache while busy: the rows' Close closes it.
	busy, dropped bool
}

// stmt returns the cached statement for query, preparing and caching it when it is not
// cached; nil when it cannot be used now (busy, or the driver's statement lacks the context
// methods), and the caller runs the query unprepared.
func (c *cachingConn) stmt(ctx context.Context, query string) (*cachedStmt, error) {
	if e, ok := c.stmts[query]; ok {
		c.lru.MoveToFront(e)
		s := e.Value.(*cachedStmt)
		if s.busy {
			return nil, nil
		}
		return s, nil
	}
	ds, err := c.innerConn.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	s := &cachedStmt{query: query}
	var ok bool
	if s.stmt, ok = ds.(ctxStmt); !ok {
		ds.Close()
		return nil, nil
	}
	c.stmts[query] = c.lru.PushFront(s)
	if c.lru.Len() > stmtCacheSize {
		c.drop(c.lru.Back())
	}
	return s, nil
}

// drop takes e's statement out of the cache, closing it unless rows of it are open.
func (c *cachingConn) drop(e *list.Element) {
	s := c.lru.Remove(e).(*cachedStmt)
	delete(c.stmts, s.query)
	if s.busy {
		s.dropped = true
		return
	}
	s.stmt.Close()
}

// forget drops s after it failed: the next call prepares the statement afresh.
func (c *cachingConn) forget(s *cachedStmt) {
	if e, ok := c.stmts[s.query]; ok && e.Value == s {
		c.drop(e)
	}
}

func (c *cachingConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if len(args) == 0 {
		return c.innerConn.ExecContext(ctx, query, args)
	}
	s, err := c.stmt(ctx, query)
	if err != nil {
		return nil, err
	} else if s == nil {
		return c.innerConn.ExecContext(ctx, query, args)
	}
	res, err := s.stmt.ExecContext(ctx, args)
	if err != nil {
		c.forget(s)
	}
	return res, err
}

func (c *cachingConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if len(args) == 0 {
		return c.innerConn.QueryContext(ctx, query, args)
	}
	s, err := c.stmt(ctx, query)
	if err != nil {
		return nil, err
	} else if s == nil {
		return c.innerConn.QueryContext(ctx, query, args)
	}
	rows, err := s.stmt.QueryContext(ctx, args)
	if err != nil {
		c.forget(s)
		return nil, err
	}
	s.busy = true
	return &cachedRows{Rows: rows, conn: c, s: s}, nil
}

// Unwrap returns the driver's connection, for what the driver offers beyond database/sql
// (modernc.org/sqlite looks for Unwrap on a wrapping connection).
func (c *cachingConn) Unwrap() driver.Conn { return c.innerConn }

// Close closes every cached statement, then the connection: SQLite does not close a
// connection while statements of it are unfinalized.
func (c *cachingConn) Close() error {
	for e := c.lru.Front(); e != nil; e = e.Next() {
		e.Value.(*cachedStmt).stmt.Close()
	}
	c.lru.Init()
	clear(c.stmts)
	return c.innerConn.Close()
}

// cachedRows are the rows of a cached statement: closing them frees the statement.
type cachedRows struct {
	driver.Rows
	conn *cachingConn
	s    *cachedStmt
}

func (r *cachedRows) Close() error {
	if r.s == nil {
		return nil // closed already: the statement may serve other rows by now
	}
	err := r.Rows.Close()
	s := r.s
	r.s, s.busy = nil, false
	switch {
	case s.dropped:
		s.stmt.Close()
	case err != nil:
		r.conn.forget(s)
	}
	return err
}
