package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fencelock/fencelock/api"
	fencelock "github.com/fencelock/fencelock/client" // "client" is the --client flag here
)

func init() {
	register(command{name: "cluster", summary: "list, join or remove the nodes of a cluster", run: runCluster})
}

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
	c, err := newClusterClient(nodes)
	if err != nil {
		return usageError("cluster %s: --addr: %s", sub, trimPrefix(err))
	}
	defer c.Close()
	switch sub {
	case "members":
		out, err := c.Members(ctx)
		if err != nil {
			return clusterFail("GET "+api.PathMembers, err)
		}
		printMembers(e.stdout, out)
		return nil
	case "join":
		if *id == "" || *raftAddr == "" || *client == "" {
			return usageError("cluster join: --id, --raft and --client are required")
		}
		out, err := c.Join(ctx, *id, *raftAddr, *client)
		if err != nil {
			return changeFail(err)
		}
		if !strings.EqualFold(out.Joined.Suffrage, "voter") {
			printMembers(e.stdout, out.MembersResponse)
			msg := out.Message
			if msg == "" {
				msg = fmt.Sprintf("%s is in the configuration as %q, not a voter", *id, out.Joined.Suffrage)
			}
			return &exitError{Code: exitNonvoter, Err: errors.New("applied in part: " + msg)}
		}
		fmt.Fprintf(e.stdout, "applied: %s joined and is a voter\n", *id)
		printMembers(e.stdout, out.MembersResponse)
		return nil
	case "remove":
		if *id == "" {
			return usageError("cluster remove: --id is required")
		}
		_, err := c.Remove(ctx, *id)
		if errors.Is(err, fencelock.ErrChangeUnknown) && errors.Is(err, fencelock.ErrNotFound) {
			// An earlier attempt that got no answer did it.
			fmt.Fprintf(e.stdout, "applied: removed %s (it is no longer a member)\n", *id)
			return nil
		}
		if err != nil {
			return changeFail(err)
		}
		fmt.Fprintf(e.stdout, "applied: removed %s\n", *id)
		return nil
	}
	return usageError("cluster: unknown subcommand %q: members, join or remove", sub)
}

func printMembers(w io.Writer, m api.MembersResponse) {
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

// newClusterClient is the client of 'cluster' and 'server --join': plain
// HTTP (an attempt that was sent and got no answer must be told from one
// that never left), 30s for one attempt (a join waits for the new node to
// catch up, up to the server's JoinCatchUp, 10s by default), and retries
// of unreachable and unavailable nodes until ctx ends, with short pauses.
func newClusterClient(addrs []string) (*fencelock.Client, error) {
	return fencelock.New(addrs,
		fencelock.WithFramed(false),
		fencelock.WithHTTPClient(&http.Client{Timeout: 30 * time.Second}),
		fencelock.WithRetries(math.MaxInt),
		fencelock.WithBackoff(50*time.Millisecond, 250*time.Millisecond))
}

// refusal is the answer of a node that refused a call (not a 503: those
// are retried until ctx ends), or nil.
func refusal(err error) *fencelock.APIError {
	var ae *fencelock.APIError
	if errors.As(err, &ae) && !errors.Is(ae, fencelock.ErrUnavailable) {
		return ae
	}
	return nil
}

// refusedWith reports whether err is a refusal with the given code.
func refusedWith(err error, code string) bool {
	ae := refusal(err)
	return ae != nil && ae.Code == code
}

// describe is a refusal as the message and the code the node answered.
func describe(ae *fencelock.APIError) string {
	code := ae.Code
	if code == "" {
		code = fmt.Sprint(ae.Status)
	}
	return fmt.Sprintf("%s (%s)", trimPrefix(errors.New(ae.Message)), code)
}

// clusterFail is the exit of a call that changes nothing: 1 refused, 3
// no node could be reached (or none could serve) before the timeout.
func clusterFail(what string, err error) error {
	if ae := refusal(err); ae != nil {
		return &exitError{Code: exitNo, Err: errors.New(describe(ae))}
	}
	return &exitError{Code: exitUnreachable, Err: fmt.Errorf("%s: %s", what, trimPrefix(err))}
}

// changeFail says exactly what became of a membership change that did not
// succeed: a refusal (nothing changed) exits 1, no node reached exits 3,
// and anything after which the change may have been applied (an attempt
// that was sent and got no answer, or a change_unknown answer) exits 5.
func changeFail(err error) error {
	switch ae := refusal(err); {
	case ae != nil:
		msg := describe(ae)
		if !strings.HasPrefix(msg, "refused") {
			msg = "refused, nothing changed: " + msg
		}
		return &exitError{Code: exitNo, Err: errors.New(msg)}
	case errors.Is(err, fencelock.ErrChangeUnknown):
		return &exitError{Code: exitChangeUnknown, Err: fmt.Errorf(
			"unknown: %s; check 'fencelock cluster members'", trimPrefix(err))}
	default:
		return &exitError{Code: exitUnreachable, Err: fmt.Errorf("nothing changed: %s", trimPrefix(err))}
	}
}
