package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/fence/mysqlfence"
	"github.com/fencelock/fencelock/fence/pgfence"
	"github.com/fencelock/fencelock/fence/redisfence"
	"github.com/fencelock/fencelock/fence/sqlitefence"
	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
)

// 'fence reset' on the fences that keep their marks beside the data:
// SQLite, PostgreSQL and MySQL/MariaDB tables (--sql), Redis hashes
// (--redis). Each adapter's Reset mends and records in one transaction
// or script.

// wasMark is a mark as a reset found it.
type wasMark struct {
	token, last uint64
	key         string
}

func resetSQL(ctx context.Context, e *env, dsn, table string, req fence.ResetRequest) error {
	if req.To > math.MaxInt64 {
		return usageError("--to %d: the SQL fences' 64-bit integers hold up to %d", req.To, int64(math.MaxInt64))
	}
	var (
		was      wasMark
		recorded string
	)
	switch {
	case strings.HasPrefix(dsn, "sqlite:"):
		path := strings.TrimPrefix(dsn, "sqlite:")
		if _, err := os.Stat(path); err != nil {
			return answerNo("%v", err)
		}
		db, err := sqlitefence.Open(path)
		if err != nil {
			return err
		}
		defer db.Close()
		sf, err := sqlitefence.New(db, table)
		if err != nil {
			return usageError("--table: %v", err)
		}
		m, err := sf.Reset(ctx, req)
		if err != nil {
			return refusedReset(err, "'SELECT resource, token FROM "+strings.TrimSuffix(sf.ResetsTable(), "_resets")+"'")
		}
		was, recorded = wasMark{m.Token, m.LastWrite, m.Key}, sf.ResetsTable()
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		if table == "" {
			table = pgfence.DefaultTable
		}
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return fmt.Errorf("connecting to PostgreSQL: %w", err)
		}
		defer conn.Close(context.WithoutCancel(ctx))
		pf := pgfence.New(conn, pgfence.WithTable(table))
		m, err := pf.Reset(ctx, req)
		if err != nil {
			return refusedReset(err, "'SELECT resource, token FROM "+table+"'")
		}
		was, recorded = wasMark{m.Token, m.LastWrite, m.Key}, pf.ResetsTable()
	case strings.HasPrefix(dsn, "mysql://"):
		if table == "" {
			table = mysqlfence.DefaultTable
		}
		cfg, err := mysqlDSN(dsn)
		if err != nil {
			return usageError("--sql: %v", err)
		}
		if cfg.DBName == "" && !strings.Contains(table, ".") {
			return usageError("--sql: the DSN names no database (mysql://user:password@host:3306/DB), and --table %q names none either", table)
		}
		connector, err := mysql.NewConnector(cfg)
		if err != nil {
			return usageError("--sql: %v", err)
		}
		db := sql.OpenDB(connector)
		defer db.Close()
		mf := mysqlfence.New(db, mysqlfence.WithTable(table))
		m, err := mf.Reset(ctx, req)
		if err != nil {
			return refusedReset(err, "'SELECT resource, token FROM "+table+"'")
		}
		was, recorded = wasMark{m.Token, m.LastWrite, m.Key}, mf.ResetsTable()
	default:
		return usageError("--sql %q: want sqlite:PATH, a postgres:// URL or mysql://DSN", dsn)
	}
	fmt.Fprintf(e.stdout, "%s (recorded in %s)\n", resetText(req, was.token, was.last, was.key), recorded)
	return nil
}

// mysqlDSN reads --sql mysql://DSN: the Go driver's own DSN after the
// scheme (user:password@tcp(host:3306)/db?param=value, as golang-migrate
// writes it), with host:port accepted for tcp(host:port).
func mysqlDSN(s string) (*mysql.Config, error) {
	dsn := strings.TrimPrefix(s, "mysql://")
	// The driver takes the last '/' as the database's and the last '@'
	// before it as the credentials' end; what lies between is the address.
	path := dsn
	if q := strings.IndexByte(path, '?'); q >= 0 {
		path = path[:q]
	}
	if slash := strings.LastIndexByte(path, '/'); slash >= 0 {
		head := dsn[:slash]
		at := strings.LastIndexByte(head, '@')
		if addr := head[at+1:]; addr != "" && !strings.Contains(addr, "(") {
			dsn = head[:at+1] + "tcp(" + addr + ")" + dsn[slash:]
		}
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("%v (want mysql://user:password@tcp(host:3306)/db, or mysql://user:password@host:3306/db)", err)
	}
	return cfg, nil
}

func resetRedis(ctx context.Context, e *env, addr string, req fence.ResetRequest) error {
	if req.To > math.MaxInt64 {
		return usageError("--to %d: the Redis fence takes tokens up to %d", req.To, int64(math.MaxInt64))
	}
	c, err := redisClient(addr, e.getenv("REDISCLI_AUTH"))
	if err != nil {
		return usageError("--redis: %v", err)
	}
	defer c.Close()
	rf := redisfence.New(c)
	m, err := rf.Reset(ctx, req)
	if err != nil {
		return refusedReset(err, "'redis-cli --scan --pattern \"fencelock:mark:*\"'")
	}
	fmt.Fprintf(e.stdout, "%s (recorded in %s)\n", resetText(req, m.Token, m.LastWrite, m.Key), rf.ResetsKey(req.Resource))
	return nil
}

// redisTarget is what --redis names: the server, and how to log in.
type redisTarget struct {
	addr, user, password string
	db                   int
}

// parseRedis reads --redis: host:port, or
// redis://[user[:password]@]host[:port][/db]; password is used when the
// URL has none (REDISCLI_AUTH, as redis-cli reads it).
func parseRedis(addr, password string) (redisTarget, error) {
	r := redisTarget{addr: addr, password: password}
	if strings.Contains(addr, "://") {
		u, err := url.Parse(addr)
		if err != nil {
			return r, err
		}
		if u.Scheme != "redis" {
			return r, fmt.Errorf("%q: want host:port or redis://host:port (the fence's client has no TLS for rediss://)", addr)
		}
		if u.User != nil {
			r.user = u.User.Username()
			if p, ok := u.User.Password(); ok {
				r.password = p
			}
		}
		if db := strings.Trim(u.Path, "/"); db != "" {
			if r.db, err = strconv.Atoi(db); err != nil || r.db < 0 {
				return r, fmt.Errorf("%q: database %q is not a number", addr, db)
			}
		}
		r.addr = u.Host
		if r.addr != "" && u.Port() == "" {
			r.addr += ":6379"
		}
	}
	if r.addr == "" {
		return r, errors.New("no address")
	}
	return r, nil
}

func redisClient(addr, password string) (*redisfence.Client, error) {
	r, err := parseRedis(addr, password)
	if err != nil {
		return nil, err
	}
	var opts []redisfence.ClientOption
	if r.password != "" {
		opts = append(opts, redisfence.WithAuth(r.user, r.password))
	}
	if r.db != 0 {
		opts = append(opts, redisfence.WithDB(r.db))
	}
	return redisfence.NewClient(r.addr, opts...), nil
}
