package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fencelock/fencelock/api"
	fencelock "github.com/fencelock/fencelock/client" // "client" is the --client flag here
	"github.com/fencelock/fencelock/internal/clustersecret"
)

// The cluster command and its subcommands, each with its own flags and
// usage on the one usage path.

const clusterUsage = `Usage: fencelock cluster members [--addr ADDRS] [--json]
       fencelock cluster join   --id ID --raft HOST:PORT --client HOST:PORT [--addr ADDRS]
       fencelock cluster remove --id ID [--addr ADDRS]
       fencelock cluster secret

members lists the nodes as the answering node sees them, with each one's
raft and client address, suffrage (voter or nonvoter), which one leads,
and each one's health as the leader sees it.

join adds a node that is running with 'fencelock server --join' (an empty
data directory, or the data of a former member of this cluster).

remove takes a node out, unless the voters left would not have a
majority answering.

secret prints a new cluster secret, which every node's raft port needs
(fencelock server --cluster-secret-file).

Run 'fencelock cluster SUBCOMMAND -h' for its flags and exit statuses.
`

const clusterMembersUsage = `Usage: fencelock cluster members [--addr ADDRS] [--json]

Lists the nodes as the answering node sees them, with each one's raft and
client address, suffrage (voter or nonvoter) and which one leads, and each
one's health as the leader sees it (a follower asks the leader): STATE is
leader, healthy, unreachable (the leader has not heard from it for twice
the heartbeat timeout) or unknown (no leader, or it did not answer);
CONTACT is when the leader last heard from it, LAG how many log entries
it was behind then. A leader the answering node has stopped hearing from
is not marked as the leader, and shows unreachable. A node that has been
removed from the cluster says so first.

Any node answers at once, leader or not. One that hears from no leader
(the cluster has lost its quorum, or an election is under way) prints
its own view: its role, term and applied index, then every member it
knows, with STATE healthy (it heard from it within the bound),
unreachable (CONTACT says when it last did) or unknown (never); a line
on stderr then says how many voters it has heard from against the
quorum, and the command exits 3. A follower hears only from its leader,
so after the leader is gone it may show the other followers unknown.

With --json, the API's members answer, which also says which node
answered, whose view the health is (health_from, or local), whether it
is ready, its role and term, whether it knows a leader (no_leader), and
how far it has applied the log.
`

const clusterJoinUsage = `Usage: fencelock cluster join --id ID --raft HOST:PORT --client HOST:PORT [--addr ADDRS]

Adds a node that is running with 'fencelock server --join' (an empty data
directory, or the data of a former member of this cluster). The leader
first checks that the node answers at --client and --raft as --id and
belongs to no other cluster, and that a majority of the voters would
answer after the change; then it adds the node as a non-voter, waits for
it to catch up with the log, and promotes it to voter.

The join is done by the leader: the command follows a not_leader answer
to it.
`

const clusterRemoveUsage = `Usage: fencelock cluster remove --id ID [--addr ADDRS]

Takes a node out, unless the voters left would not have a majority
answering. Removing the leader makes it hand leadership to another voter
first; the command then sends the removal to the new leader.

The removal is done by the leader: the command follows a not_leader
answer to it.
`

const clusterSecretUsage = `Usage: fencelock cluster secret

Prints a new random cluster secret (256 bits, a line of 63 characters)
on stdout. Every node of a cluster is given the same secret, in a file
that only the user the server runs as can read (mode 0600):

  (umask 077; fencelock cluster secret > cluster.secret)
  fencelock server --id n1 ... --raft HOST:PORT --cluster-secret-file cluster.secret

A node with a raft port (--raft) needs it, or peer TLS (--ca): its raft
peers prove the secret before anything they send is read, then talk
mutual TLS 1.3; a process without it is refused, and counted in
fencelock_raft_connections_refused_total. To change it, see
docs/OPERATIONS.md ("Rotating the cluster secret").
`

const clusterChangeExit = `Exit status:
  0  applied (join: the node is a voter; remove: the node is out)
  1  refused, nothing changed (the message says why)
  2  bad usage
  3  no node could be reached, nothing changed
  5  unknown: the change may or may not have been applied (say, a timeout);
     check 'fencelock cluster members'
  6  join applied in part: the node is a non-voter that has not caught up;
     run the same join again to promote it (or remove it)
`

const clusterMembersExit = `Exit status: 0 listed; 1 refused; 2 bad usage; 3 no node could be
reached (or none could answer) before --timeout, or the node that
answered knows no leader (no quorum): its own view is printed first.
`

var clusterSubcommands = []string{"members", "join", "remove", "secret"}

// runClusterSecret prints a new cluster secret.
func runClusterSecret(e *env, args []string) error {
	f := newFlags(e, "cluster secret", clusterSecretUsage)
	pos, err := f.parse(args)
	if err != nil {
		return err
	}
	if err := noArgs(pos); err != nil {
		return err
	}
	s, err := clustersecret.New()
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(e.stdout, s.Encode())
	return err
}

// Exit statuses of join and remove beyond the shared ones.
const (
	exitChangeUnknown = 5 // the change may or may not have been applied
	exitNonvoter      = 6 // joined, but not promoted to voter
)

func runCluster(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "-help" || args[0] == "--help" {
		fmt.Fprint(e.stdout, clusterUsage)
		if len(args) == 0 {
			return &exitError{Code: exitUsage}
		}
		return errHelp
	}
	sub, args := args[0], args[1:]
	if !slices.Contains(clusterSubcommands, sub) {
		msg := fmt.Sprintf("unknown subcommand %q: members, join, remove or secret", sub)
		if s := suggest(sub, clusterSubcommands); s != "" {
			msg = fmt.Sprintf("unknown subcommand %q; did you mean %q?", sub, s)
		}
		return usageError("%s", msg)
	}
	return named("cluster "+sub, runClusterSub(ctx, e, sub, args))
}

func runClusterSub(ctx context.Context, e *env, sub string, args []string) error {
	if sub == "secret" {
		return runClusterSecret(e, args)
	}
	usage := map[string]string{"members": clusterMembersUsage, "join": clusterJoinUsage, "remove": clusterRemoveUsage}[sub]
	f := newFlags(e, "cluster "+sub, usage)
	f.after = clusterChangeExit
	var id, raftAddr, clientAddr *string
	switch sub {
	case "members":
		f.after = clusterMembersExit
	case "join":
		id = f.String("id", "", "the new node's `ID`, as its --id; required")
		raftAddr = f.String("raft", "", "the new node's raft `HOST:PORT`, as its --raft; required")
		clientAddr = f.String("client", "", "the new node's client (HTTP) `HOST:PORT`; required")
	case "remove":
		id = f.String("id", "", "the `ID` of the node to take out; required")
	}
	addrs := f.String("addr", defaultListen, "`ADDRS`: host:port, or a comma-separated list of cluster nodes, tried in order")
	f.Env("addr", "FENCELOCK_ADDR")
	asJSON := f.Bool("json", false, "print the answer as JSON (the API's shapes, package api)")
	timeout := f.Duration("timeout", 30*time.Second, "give up after this long")
	tlsFlags := addClientTLSFlags(f)
	token := authTokenFlag(f)
	pos, err := f.parse(args)
	if err != nil {
		return err
	}
	if err := noArgs(pos); err != nil {
		return err
	}
	nodes := splitAddrs(*addrs)
	if len(nodes) == 0 {
		return usageError("--addr %q names no address", *addrs)
	}
	if *timeout <= 0 {
		return usageError("--timeout must be positive, not %v", *timeout)
	}
	switch {
	case sub == "join" && (*id == "" || *raftAddr == "" || *clientAddr == ""):
		return usageError("--id, --raft and --client are required")
	case sub == "remove" && *id == "":
		return usageError("--id is required")
	}
	tlsCfg, err := tlsFlags.config()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	c, err := newClusterClient(nodes, tlsCfg, authOption(*token)...)
	if err != nil {
		return usageError("--addr: %s", trimPrefix(err))
	}
	defer c.Close()
	switch sub {
	case "members":
		out, err := c.Members(ctx)
		if err != nil {
			return clusterFail("GET "+api.PathMembers, err)
		}
		if *asJSON {
			if err := writeJSON(e.stdout, out); err != nil {
				return err
			}
		} else {
			printMembers(e.stdout, out)
		}
		if out.NoLeader {
			return &exitError{Code: exitUnreachable, Err: errors.New(noLeader(out))}
		}
		return nil
	case "join":
		out, err := c.Join(ctx, *id, *raftAddr, *clientAddr)
		if err != nil {
			return changeFail(err)
		}
		voter := strings.EqualFold(out.Joined.Suffrage, "voter")
		switch {
		case *asJSON:
			if err := writeJSON(e.stdout, out); err != nil {
				return err
			}
		case voter:
			fmt.Fprintf(e.stdout, "applied: %s joined and is a voter\n", *id)
			printMembers(e.stdout, out.MembersResponse)
		default:
			printMembers(e.stdout, out.MembersResponse)
		}
		if !voter {
			msg := out.Message
			if msg == "" {
				msg = fmt.Sprintf("%s is in the configuration as %q, not a voter", *id, out.Joined.Suffrage)
			}
			return &exitError{Code: exitNonvoter, Err: errors.New("applied in part: " + msg)}
		}
		return nil
	default: // remove
		out, err := c.Remove(ctx, *id)
		gone := ""
		if errors.Is(err, fencelock.ErrChangeUnknown) && errors.Is(err, fencelock.ErrNotFound) {
			// An earlier attempt that got no answer did it.
			err, gone, out = nil, " (it is no longer a member)", api.RemoveResponse{Removed: *id}
		}
		if err != nil {
			return changeFail(err)
		}
		if *asJSON {
			return writeJSON(e.stdout, out)
		}
		fmt.Fprintf(e.stdout, "applied: removed %s%s\n", *id, gone)
		return nil
	}
}

func printMembers(w io.Writer, m api.MembersResponse) {
	if m.Removed {
		fmt.Fprintf(w, "%s, which answered, is no longer a member: it was removed from the cluster and serves nothing. The members as it last saw them:\n", m.Node)
	}
	if m.Local && !m.Removed {
		why := "it hears from no leader"
		if !m.NoLeader && m.Leader != "" {
			why = "the leader " + m.Leader + " did not answer it"
		}
		fmt.Fprintf(w, "%s's own view (%s, term %d, applied index %d): %s.\n", m.Node, m.Role, m.Term, m.AppliedIndex, why)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tRAFT\tCLIENT\tSUFFRAGE\tLEADER\tSTATE\tCONTACT\tLAG")
	for _, n := range m.Members {
		client, lead, contact, lag := n.ClientAddr, "", "-", "-"
		if client == "" {
			client = "-"
		}
		if n.Leader {
			lead = "*"
		}
		state := n.State
		if state == "" {
			state = api.MemberUnknown // a server that does not say
		}
		if n.LastContactMs != nil {
			contact = api.Duration(*n.LastContactMs).String() + " ago"
		}
		if n.LagEntries != nil {
			lag = strconv.FormatUint(*n.LagEntries, 10)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n.ID, n.RaftAddr, client, strings.ToLower(n.Suffrage), lead, state, contact, lag)
	}
	tw.Flush()
}

// noLeader is the line that says why a members answer without a leader
// exits 3: how many voters the answering node has heard from against
// the quorum.
func noLeader(m api.MembersResponse) string {
	voters, heard := 0, 0
	for _, n := range m.Members {
		if !strings.EqualFold(n.Suffrage, "voter") {
			continue
		}
		voters++
		if n.State == api.MemberHealthy || n.State == api.MemberLeader {
			heard++
		}
	}
	quorum := voters/2 + 1
	within := api.Duration(m.UnreachableAfterMs).String()
	if heard < quorum {
		return fmt.Sprintf("no quorum, no leader: %s has heard from %d of %d voters in the last %s (itself included), and a quorum is %d; "+
			"nothing can be granted, extended or released until a majority of the voters is back", m.Node, heard, voters, within, quorum)
	}
	return fmt.Sprintf("no leader: %s has heard from %d of %d voters in the last %s (a quorum is %d), but from no leader; an election may be under way, retry",
		m.Node, heard, voters, within, quorum)
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
// With tlsCfg, https; opts come last.
func newClusterClient(addrs []string, tlsCfg *tls.Config, more ...fencelock.Option) (*fencelock.Client, error) {
	opts := []fencelock.Option{
		fencelock.WithFramed(false),
		fencelock.WithHTTPClient(clusterHTTP(tlsCfg)),
		fencelock.WithRetries(math.MaxInt),
		fencelock.WithBackoff(50*time.Millisecond, 250*time.Millisecond),
	}
	if tlsCfg != nil {
		opts = append(opts, fencelock.WithTLSConfig(tlsCfg))
	}
	return fencelock.New(addrs, append(opts, more...)...)
}

// newJoinClient is the client of 'server --join': newClusterClient with
// two back-offs per attempt across the addresses, so that an address
// nobody answers at fails the attempt in well under a second and is
// reported; the join loop then backs off and asks again.
func newJoinClient(addrs []string, tlsCfg *tls.Config, more ...fencelock.Option) (*fencelock.Client, error) {
	return newClusterClient(addrs, tlsCfg, append(more, fencelock.WithRetries(2))...)
}

// unreachable: no node could be reached at all.
func unreachable(err error) bool { return errors.Is(err, fencelock.ErrUnreachable) }

// unavailableOrUnknown: a node answered that it cannot serve now (no
// leader, shutting down), or a change may or may not have applied: both
// are worth asking again.
func unavailableOrUnknown(err error) bool {
	return errors.Is(err, fencelock.ErrUnavailable) || errors.Is(err, fencelock.ErrChangeUnknown)
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
