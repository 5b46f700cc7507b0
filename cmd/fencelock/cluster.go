package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"
)

func init() {
	register(command{name: "cluster", summary: "list, join or remove the nodes of a cluster", run: runCluster})
}

const clusterUsage = `Usage: fencelock cluster members [--addr ADDRS]
       fencelock cluster join   --id ID --raft HOST:PORT --client HOST:PORT [--addr ADDRS]
       fencelock cluster remove --id ID [--addr ADDRS]

members lists the voters as the answering node sees them, with each one's
raft and client address and which one leads. join adds a node (started
with 'fencelock server --join' or with no raft state) as a voter; remove
takes one out. join and remove are done by the leader: the command follows
a not_leader answer to it.

ADDRS is one host:port or a comma-separated list of cluster nodes (env
FENCELOCK_ADDR; default 127.0.0.1:7470); they are tried in order.

Flags:
`

func runCluster(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(e.stdout, clusterUsage)
		if len(args) == 0 {
			return &exitError{Code: exitUsage}
		}
		return nil
	}
	sub, args := args[0], args[1:]
	fs := flag.NewFlagSet("cluster "+sub, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	addrs := fs.String("addr", envOr(e, "FENCELOCK_ADDR", defaultListen), "server `addresses`, comma-separated (env FENCELOCK_ADDR)")
	timeout := fs.Duration("timeout", 15*time.Second, "give up after this long")
	id := fs.String("id", "", "node `id`")
	raftAddr := fs.String("raft", "", "the node's raft `address`")
	client := fs.String("client", "", "the node's client (HTTP) `address`")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			fmt.Fprint(e.stdout, clusterUsage)
			fs.SetOutput(e.stdout)
			fs.PrintDefaults()
			return nil
		}
		return usageError("cluster %s: %v (run 'fencelock cluster -h')", sub, err)
	}
	if fs.NArg() > 0 {
		return usageError("cluster %s: unexpected argument %q", sub, fs.Arg(0))
	}
	nodes := splitAddrs(*addrs)
	if len(nodes) == 0 {
		return usageError("cluster %s: --addr %q names no address", sub, *addrs)
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	c := newClusterClient(nodes)
	switch sub {
	case "members":
		var out membersReply
		if err := c.call(ctx, http.MethodGet, "/v1/cluster/members", nil, &out); err != nil {
			return err
		}
		printMembers(e.stdout, out)
		return nil
	case "join":
		if *id == "" || *raftAddr == "" || *client == "" {
			return usageError("cluster join: --id, --raft and --client are required")
		}
		var out membersReply
		body := map[string]string{"id": *id, "raft_addr": *raftAddr, "client_addr": *client}
		if err := c.call(ctx, http.MethodPost, "/v1/cluster/join", body, &out); err != nil {
			return err
		}
		printMembers(e.stdout, out)
		return nil
	case "remove":
		if *id == "" {
			return usageError("cluster remove: --id is required")
		}
		if err := c.call(ctx, http.MethodPost, "/v1/cluster/remove", map[string]string{"id": *id}, nil); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "removed %s\n", *id)
		return nil
	}
	return usageError("cluster: unknown subcommand %q: members, join or remove", sub)
}

type memberReply struct {
	ID         string `json:"id"`
	RaftAddr   string `json:"raft_addr"`
	ClientAddr string `json:"client_addr"`
	Suffrage   string `json:"suffrage"`
	Leader     bool   `json:"leader"`
}

type membersReply struct {
	Leader     string        `json:"leader"`
	LeaderAddr string        `json:"leader_addr"`
	Members    []memberReply `json:"members"`
}

func printMembers(w io.Writer, m membersReply) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tRAFT\tCLIENT\tSUFFRAGE\tLEADER")
	for _, n := range m.Members {
		client, lead := n.ClientAddr, ""
		if client == "" {
			client = "-"
		}
		if n.Leader {
			lead = "*"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", n.ID, n.RaftAddr, client, strings.ToLower(n.Suffrage), lead)
	}
	tw.Flush()
}

func splitAddrs(s string) []string {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// clusterClient sends one call to a cluster: it tries the addresses in
// turn, goes straight to a leader named in a not_leader answer, and
// retries 503s with a jittered pause until ctx ends. It is the small
// subset of the client package that 'cluster' and 'server --join' need.
type clusterClient struct {
	addrs []string
	http  *http.Client
}

func newClusterClient(addrs []string) *clusterClient {
	return &clusterClient{addrs: addrs, http: &http.Client{Timeout: 10 * time.Second}}
}

type wireError struct {
	Status int    `json:"-"`
	Msg    string `json:"error"`
	Code   string `json:"code"`
	Leader string `json:"leader"`
}

func (e *wireError) Error() string { return fmt.Sprintf("%s (%s)", e.Msg, e.Code) }

func (c *clusterClient) call(ctx context.Context, method, path string, body, out any) error {
	var raw []byte
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		raw = b
	}
	var last error
	next := 0
	redirect := ""
	for attempt := 0; ; attempt++ {
		addr := redirect
		if addr == "" {
			addr = c.addrs[next%len(c.addrs)]
			next++
		}
		redirect = ""
		err := c.once(ctx, method, "http://"+addr+path, raw, out)
		if err == nil {
			return nil
		}
		last = err
		var we *wireError
		if errors.As(err, &we) {
			if we.Status != http.StatusServiceUnavailable {
				return &exitError{Code: exitNo, Err: err}
			}
			if we.Code == "not_leader" && we.Leader != "" && we.Leader != addr {
				redirect = we.Leader
				continue
			}
		}
		pause := 50*time.Millisecond + rand.N(time.Duration(min(attempt+1, 8))*25*time.Millisecond)
		select {
		case <-ctx.Done():
			return &exitError{Code: exitUnreachable, Err: fmt.Errorf("%s %s: %w", method, path, last)}
		case <-time.After(pause):
		}
	}
}

func (c *clusterClient) once(ctx context.Context, method, url string, raw []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(raw))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		we := &wireError{Status: resp.StatusCode}
		if json.Unmarshal(data, we) != nil || we.Code == "" {
			we.Msg, we.Code = strings.TrimSpace(string(data)), fmt.Sprint(resp.StatusCode)
		}
		return we
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(data, out)
}
