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
	"net"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"
)

const clusterUsage = `Usage: fencelock cluster members [--addr ADDRS]
       fencelock cluster join   --id ID --raft HOST:PORT --client HOST:PORT [--addr ADDRS]
       fencelock cluster remove --id ID [--addr ADDRS]

members lists the nodes as the answering node sees them, with each one's
raft and client address, suffrage (voter or nonvoter) and which one leads.

join adds a node that is running with 'fencelock server --join' (an empty
data directory, or the data of a former member of this cluster). The
leader first checks that the node answers at --client and --raft as --id
and belongs to no other cluster, and that a majority of the voters would
answer after the change; then it adds the node as a non-voter, waits for
it to catch up with the log, and promotes it to voter.

remove takes a node out, unless the voters left would not have a
majority answering. Removing the leader makes it hand leadership to
another voter first; the command then sends the removal to the new leader.

join and remove are done by the leader: the command follows a not_leader
answer to it. They exit with:
  0  applied (join: the node is a voter; remove: the node is out)
  1  refused, nothing changed (the message says why)
  2  bad usage
  3  no node could be reached, nothing changed
  5  unknown: the change may or may not have been applied (say, a timeout);
     check 'fencelock cluster members'
  6  join applied in part: the node is a non-voter that has not caught up;
     run the same join again to promote it (or remove it)

ADDRS is one host:port or a comma-separated list of cluster nodes (env
FENCELOCK_ADDR; default 127.0.0.1:7470); they are tried in order.

Flags:
`

// Exit statuses of join and remove beyond the shared ones.
const (
	exitChangeUnknown = 5 // the change may or may not have been applied
	exitNonvoter      = 6 // joined, but not promoted to voter
)

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
	timeout := fs.Duration("timeout", 30*time.Second, "give up after this long")
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
		var out joinReply
		body := map[string]string{"id": *id, "raft_addr": *raftAddr, "client_addr": *client}
		if _, err := c.change(ctx, "/v1/cluster/join", body, &out); err != nil {
			return err
		}
		if !strings.EqualFold(out.Joined.Suffrage, "voter") {
			printMembers(e.stdout, out.membersReply)
			msg := out.Message
			if msg == "" {
				msg = fmt.Sprintf("%s is in the configuration as %q, not a voter", *id, out.Joined.Suffrage)
			}
			return &exitError{Code: exitNonvoter, Err: errors.New("applied in part: " + msg)}
		}
		fmt.Fprintf(e.stdout, "applied: %s joined and is a voter\n", *id)
		printMembers(e.stdout, out.membersReply)
		return nil
	case "remove":
		if *id == "" {
			return usageError("cluster remove: --id is required")
		}
		maybe, err := c.change(ctx, "/v1/cluster/remove", map[string]string{"id": *id}, nil)
		var we *wireError
		if maybe && errors.As(err, &we) && we.Status == http.StatusNotFound {
			// An earlier attempt that got no answer did it.
			fmt.Fprintf(e.stdout, "applied: removed %s (it is no longer a member)\n", *id)
			return nil
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "applied: removed %s\n", *id)
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
	ClusterID  string        `json:"cluster_id"`
	Members    []memberReply `json:"members"`
}

type joinReply struct {
	membersReply
	Joined struct {
		ID       string `json:"id"`
		Suffrage string `json:"suffrage"`
	} `json:"joined"`
	Message string `json:"message"`
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
	// A join waits for the new node to catch up (up to the server's
	// JoinCatchUp, 10s by default) before it answers.
	return &clusterClient{addrs: addrs, http: &http.Client{Timeout: 30 * time.Second}}
}

type wireError struct {
	Status int    `json:"-"`
	Msg    string `json:"error"`
	Code   string `json:"code"`
	Leader string `json:"leader"`
}

func (e *wireError) Error() string { return fmt.Sprintf("%s (%s)", e.Msg, e.Code) }

func (c *clusterClient) call(ctx context.Context, method, path string, body, out any) error {
	err := c.loop(ctx, body, func(ctx context.Context, addr string, raw []byte) error {
		return c.once(ctx, method, "http://"+addr+path, raw, out)
	})
	var xe *exitError
	if errors.As(err, &xe) && xe.Code == exitUnreachable {
		xe.Err = fmt.Errorf("%s %s: %w", method, path, xe.Err)
	}
	return err
}

// loop runs attempt against the addresses in turn, following not_leader
// and retrying 503s, until an answer other than a 503 or ctx ends.
func (c *clusterClient) loop(ctx context.Context, body any, attempt func(ctx context.Context, addr string, raw []byte) error) error {
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
	for try := 0; ; try++ {
		addr := redirect
		if addr == "" {
			addr = c.addrs[next%len(c.addrs)]
			next++
		}
		redirect = ""
		err := attempt(ctx, addr, raw)
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
		pause := 50*time.Millisecond + rand.N(time.Duration(min(try+1, 8))*25*time.Millisecond)
		select {
		case <-ctx.Done():
			return &exitError{Code: exitUnreachable, Err: last}
		case <-time.After(pause):
		}
	}
}

// change sends a membership change like call, and says exactly what
// became of it: on an error, a refusal (4xx: nothing changed) exits 1, no
// node reached exits 3, and anything after which the change may have been
// applied (an attempt that was sent and got no answer, or a change_unknown
// answer) exits 5. maybe reports that an earlier attempt may have applied
// it, for a caller that can tell from a later refusal.
func (c *clusterClient) change(ctx context.Context, path string, body, out any) (maybe bool, err error) {
	attempt := func(ctx context.Context, addr string, raw []byte) error {
		err := c.once(ctx, http.MethodPost, "http://"+addr+path, raw, out)
		var (
			we *wireError
			oe *net.OpError
		)
		switch {
		case err == nil:
		case errors.As(err, &we):
			maybe = maybe || we.Code == "change_unknown"
		case errors.As(err, &oe) && oe.Op == "dial":
			// never sent
		default:
			maybe = true // sent; the answer was lost
		}
		return err
	}
	err = c.loop(ctx, body, attempt)
	var xe *exitError
	switch {
	case err == nil:
		return maybe, nil
	case errors.As(err, &xe) && xe.Code == exitNo:
		msg := xe.Err.Error()
		if !strings.HasPrefix(msg, "refused") {
			msg = "refused, nothing changed: " + msg
		}
		return maybe, &exitError{Code: exitNo, Err: errors.New(msg)}
	case maybe:
		return maybe, &exitError{Code: exitChangeUnknown, Err: fmt.Errorf(
			"unknown: the change may or may not have been applied (%v); check 'fencelock cluster members'", xe.Err)}
	default:
		return maybe, &exitError{Code: exitUnreachable, Err: fmt.Errorf("nothing changed: %w", xe.Err)}
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
