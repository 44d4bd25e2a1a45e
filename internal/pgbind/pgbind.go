// Package pgbind lets SQL written with MySQL's and SQLite's `?`
// placeholders run on PostgreSQL, whose placeholders are $1, $2, …: it
// wraps a database/sql driver connector so that every statement a
// connection prepares, executes or queries has its `?` rewritten. The
// rest of the SQL code (offsets, the sinks) keeps one text per statement
// where the dialects agree.
//
// Only `?` outside string literals, quoted identifiers, dollar-quoted
// strings and comments is a placeholder: 'a?b', "c?", $$?$$ and -- ? are
// left alone. PostgreSQL's JSON operators ?, ?| and ?& can't be written
// through a connection of this package.
package pgbind

import (
	"context"
	"database/sql/driver"
	"strconv"
	"strings"
)

// Rebind rewrites query's `?` placeholders as $1, $2, … in order.
func Rebind(query string) string {
	if !strings.Contains(query, "?") {
		return query
	}
	var b strings.Builder
	b.Grow(len(query) + 8)
	n := 0
	for i := 0; i < len(query); {
		c := query[i]
		switch {
		case c == '?':
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			i++
			continue
		case c == '\'' || c == '"':
			j := closing(query, i+1, c)
			b.WriteString(query[i:j])
			i = j
			continue
		case c == '-' && strings.HasPrefix(query[i:], "--"):
			j := strings.IndexByte(query[i:], '\n')
			if j < 0 {
				j = len(query) - i
			}
			b.WriteString(query[i : i+j])
			i += j
			continue
		case c == '/' && strings.HasPrefix(query[i:], "/*"):
			j := strings.Index(query[i+2:], "*/")
			end := len(query)
			if j >= 0 {
				end = i + 2 + j + 2
			}
			b.WriteString(query[i:end])
			i = end
			continue
		case c == '$':
			if tag, ok := dollarTag(query[i:]); ok {
				end := len(query)
				if j := strings.Index(query[i+len(tag):], tag); j >= 0 {
					end = i + len(tag) + j + len(tag)
				}
				b.WriteString(query[i:end])
				i = end
				continue
			}
		}
		b.WriteByte(c)
		i++
	}
	return b.String()
}

// closing is the index just past the quote q that closes a literal or
// identifier opened before from (a doubled quote is part of it).
func closing(s string, from int, q byte) int {
	for i := from; i < len(s); i++ {
		if s[i] == q {
			if i+1 < len(s) && s[i+1] == q {
				i++
				continue
			}
			return i + 1
		}
	}
	return len(s)
}

// dollarTag is the opening tag of a dollar-quoted string at the start of
// s: $$ or $name$ (a $1 placeholder is none).
func dollarTag(s string) (string, bool) {
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '$':
			return s[:i+1], true
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 1 && c >= '0' && c <= '9':
		default:
			return "", false
		}
	}
	return "", false
}

// Connector wraps c: its connections rewrite `?` placeholders (Rebind).
// Open the pool with sql.OpenDB(pgbind.Connector(c)).
func Connector(c driver.Connector) driver.Connector { return connector{c} }

type connector struct{ driver.Connector }

func (c connector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &bindConn{conn}, nil
}

// bindConn delegates to the wrapped connection (which must implement the
// context interfaces, as pgx's stdlib connection does), rebinding queries.
type bindConn struct{ driver.Conn }

func (c *bindConn) Prepare(query string) (driver.Stmt, error) { return c.Conn.Prepare(Rebind(query)) }

func (c *bindConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	return c.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, Rebind(query))
}

func (c *bindConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	return c.Conn.(driver.ExecerContext).ExecContext(ctx, Rebind(query), args)
}

func (c *bindConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	return c.Conn.(driver.QueryerContext).QueryContext(ctx, Rebind(query), args)
}

func (c *bindConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	return c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
}

func (c *bindConn) Ping(ctx context.Context) error { return c.Conn.(driver.Pinger).Ping(ctx) }

func (c *bindConn) ResetSession(ctx context.Context) error {
	return c.Conn.(driver.SessionResetter).ResetSession(ctx)
}

// IsValid asks the wrapped connection when it can say (pgx's stdlib
// connection can't: database/sql then keeps a connection until one of its
// calls returns driver.ErrBadConn, which is what it does for any driver
// without a Validator).
func (c *bindConn) IsValid() bool {
	v, ok := c.Conn.(driver.Validator)
	return !ok || v.IsValid()
}

func (c *bindConn) CheckNamedValue(v *driver.NamedValue) error {
	return c.Conn.(driver.NamedValueChecker).CheckNamedValue(v)
}

// Unwrap is the wrapped connection, for (*sql.Conn).Raw users that need
// the driver's own (pgx: *stdlib.Conn for COPY).
func (c *bindConn) Unwrap() driver.Conn { return c.Conn }
