package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/fencelock/fencelock/internal/server"
)

func init() {
	register(command{name: "server", summary: "run a durable lock server (HTTP/JSON API)", run: runServer})
}

const (
	defaultListen = "127.0.0.1:7470"
	defaultData   = "fencelock-data"
)

const serverUsage = `Usage: fencelock server [--listen ADDR] [--data DIR]

Runs a durable lock server: a single raft voter whose log and snapshots
live in DIR. It answers the HTTP/JSON API of docs/API.md and shuts down
gracefully on SIGINT or SIGTERM.

Flags (a flag beats its environment variable):
`

func runServer(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	listen := fs.String("listen", envOr(e, "FENCELOCK_LISTEN", defaultListen), "HTTP `address` to listen on (env FENCELOCK_LISTEN)")
	data := fs.String("data", envOr(e, "FENCELOCK_DATA", defaultData), "data `directory` (env FENCELOCK_DATA)")
	logLevel := fs.String("log-level", "info", "log `level`: debug, info, warn or error")
	grace := fs.Duration("shutdown-grace", 10*time.Second, "how long in-flight requests may take at shutdown")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			fmt.Fprint(e.stdout, serverUsage)
			fs.SetOutput(e.stdout)
			fs.PrintDefaults()
			return nil
		}
		return usageError("server: %v (run 'fencelock server -h')", err)
	}
	if fs.NArg() > 0 {
		return usageError("server: unexpected argument %q (run 'fencelock server -h')", fs.Arg(0))
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return usageError("server: --log-level: %v", err)
	}
	if *data == "" {
		return usageError("server: --data must not be empty")
	}
	log := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: level}))

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("server: %w", err)
	}
	cfg := server.Config{DataDir: *data, Logger: log}
	return server.Serve(ctx, ln, cfg, *grace)
}

func envOr(e *env, name, def string) string {
	if v := strings.TrimSpace(e.getenv(name)); v != "" {
		return v
	}
	return def
}
