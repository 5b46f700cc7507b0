package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/internal/acl"
)

// The acl command: bootstrap, tokens and policies (docs/SECURITY.md,
// "Authentication and ACLs"), and the --auth-token flag every client
// command takes.

// authTokenEnv holds the bearer token; FENCELOCK_TOKEN is the fencing
// token 'lock' gives its command, not a credential.
const authTokenEnv = "FENCELOCK_AUTH_TOKEN"

// authTokenFlag adds --auth-token (and its variable) to f.
func authTokenFlag(f *flags) *string {
	p := f.String("auth-token", "", "bearer `SECRET` for a cluster with ACLs on (fencelock acl)")
	f.Env("auth-token", authTokenEnv)
	return p
}

// authOption is the client option for a token ("": none).
func authOption(token string) []client.Option {
	if token == "" {
		return nil
	}
	return []client.Option{client.WithAuthToken(token)}
}

// aclSynopsis is each subcommand's usage line.
var aclSynopsis = map[string]string{
	"bootstrap":     "bootstrap [--addr ADDRS]",
	"whoami":        "whoami",
	"token create":  "token create --name NAME --policy POLICY[,POLICY...] [--no-secret] [--replace]",
	"token list":    "token list",
	"token delete":  "token delete --name NAME",
	"policy set":    "policy set NAME --rule PREFIX:VERBS[:deny] [--rule ...]",
	"policy list":   "policy list",
	"policy delete": "policy delete NAME",
}

var aclSubcommands = []string{"bootstrap", "whoami", "token create", "token list", "token delete",
	"policy set", "policy list", "policy delete"}

const aclText = `bootstrap turns the cluster's ACLs on and prints the secret of the
principal "admin" (every verb on every key), once per cluster; later
calls are refused. From then on every call needs --auth-token (or
FENCELOCK_AUTH_TOKEN), except /healthz, /readyz and the node identity.

token create makes a principal and prints its secret, shown this once.
A principal may act only as holders named after it: NAME or NAME/....
With --no-secret it has no token and is reached only by a verified TLS
client certificate whose SAN or CN is NAME.

policy set NAME replaces policy NAME with the rules given: VERBS is a
comma-separated list of lock (acquire, wait, extend, renew, release),
read (check, get, list) and admin (membership, ACL changes on the prefix
"", force-release on a key). The rule with the longest prefix that
matches a key decides; at one prefix a deny beats an allow; no rule is a
deny.

Every subcommand but bootstrap needs a principal with admin on "".
`

// aclUsage lists every subcommand; aclSubUsage(sub) puts sub's first.
var aclUsage = aclSubUsage("")

func aclSubUsage(first string) string {
	var b strings.Builder
	lead := "Usage: fencelock acl "
	if first != "" {
		b.WriteString(lead + aclSynopsis[first] + "\n")
		lead = "       fencelock acl "
	}
	for _, sub := range aclSubcommands {
		if sub != first {
			b.WriteString(lead + aclSynopsis[sub] + "\n")
			lead = "       fencelock acl "
		}
	}
	return b.String() + "\n" + aclText
}

const aclExit = `Exit status: 0 done; 1 refused (no such name, a name taken); 2 bad
usage; 3 the server cannot be reached or cannot serve; 7 refused by the
ACLs (unauthenticated, permission denied, already bootstrapped).
`

func runACL(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "-help" || args[0] == "--help" {
		fmt.Fprint(e.stdout, aclUsage)
		if len(args) == 0 {
			return &exitError{Code: exitUsage}
		}
		return errHelp
	}
	sub, rest := args[0], args[1:]
	if (sub == "token" || sub == "policy") && len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		sub, rest = sub+" "+rest[0], rest[1:]
	}
	if !slices.Contains(aclSubcommands, sub) {
		return usageError("unknown subcommand %q: %s", sub, strings.Join(aclSubcommands, ", "))
	}
	return named("acl "+sub, runACLSub(ctx, e, sub, rest))
}

// ruleList is a repeatable --rule.
type ruleList []string

func (r *ruleList) String() string     { return strings.Join(*r, " ") }
func (r *ruleList) Set(v string) error { *r = append(*r, v); return nil }

func runACLSub(ctx context.Context, e *env, sub string, args []string) error {
	f := newFlags(e, "acl "+sub, aclSubUsage(sub))
	f.after = aclExit
	var (
		name, policies   *string
		noSecret, replce *bool
		rules            ruleList
	)
	switch sub {
	case "token create":
		name = f.String("name", "", "the principal's `NAME`; required")
		policies = f.String("policy", "", "its `POLICIES`, comma-separated")
		noSecret = f.Bool("no-secret", false, "no token: the principal is reached only by a TLS client certificate naming it")
		replce = f.Bool("replace", false, "replace an existing principal of that name (its old token stops working)")
	case "token delete":
		name = f.String("name", "", "the principal's `NAME`; required")
	case "policy set":
		f.Var(&rules, "rule", "a rule `PREFIX:VERBS[:deny]`; repeat for more")
	}
	addr := f.String("addr", defaultListen, "server `ADDRS`: host:port, or a comma-separated list of cluster nodes")
	f.Env("addr", "FENCELOCK_ADDR")
	tlsFlags := addClientTLSFlags(f)
	token := authTokenFlag(f)
	asJSON := f.Bool("json", false, "print the answer as JSON (the API's shapes, package api)")
	timeout := f.Duration("timeout", 10*time.Second, "how long to wait for an answer")
	pos, err := f.parse(args)
	if err != nil {
		return err
	}
	var policyName string
	switch sub {
	case "policy set", "policy delete":
		if len(pos) != 1 {
			return usageError("give the policy's NAME, once")
		}
		policyName = pos[0]
	default:
		if err := noArgs(pos); err != nil {
			return err
		}
	}
	if name != nil && *name == "" {
		return usageError("--name is required")
	}
	var wireRules []api.ACLRule
	for _, r := range rules {
		rule, err := acl.ParseRule(r)
		if err != nil {
			return usageError("--rule %q: %s", r, strings.TrimPrefix(err.Error(), "acl: "))
		}
		wireRules = append(wireRules, api.ACLRule{Prefix: rule.Prefix, Verbs: strings.Split(rule.Verbs.String(), ","), Deny: rule.Deny})
	}
	if sub == "policy set" && len(wireRules) == 0 {
		return usageError("give at least one --rule")
	}
	if *timeout <= 0 {
		return usageError("--timeout must be positive, not %v", *timeout)
	}
	tlsCfg, err := tlsFlags.config()
	if err != nil {
		return err
	}
	opts := authOption(*token)
	if tlsCfg != nil {
		opts = append(opts, client.WithTLSConfig(tlsCfg))
	}
	c, err := client.New([]string{*addr}, opts...)
	if err != nil {
		return usageError("--addr: %s", trimPrefix(err))
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	print := func(v any, text func()) error {
		if *asJSON {
			return writeJSON(e.stdout, v)
		}
		text()
		return nil
	}
	what := "acl " + sub
	switch sub {
	case "bootstrap":
		out, err := c.ACLBootstrap(ctx)
		if err != nil {
			return clientFail(what, err)
		}
		return print(out, func() {
			fmt.Fprintf(e.stdout, "%s\n", out.Secret)
			fmt.Fprintf(e.stderr, "ACLs are on. The secret above is principal %q's (policy %q); it is shown this once.\n"+
				"Use it with --auth-token or %s.\n", out.Principal, acl.AdminPolicy, authTokenEnv)
		})
	case "whoami":
		out, err := c.WhoAmI(ctx)
		if err != nil {
			return clientFail(what, err)
		}
		return print(out, func() {
			if !out.Auth {
				fmt.Fprintln(e.stdout, "(ACLs are off: anyone may do anything)")
				return
			}
			fmt.Fprintln(e.stdout, out.Principal)
		})
	case "token create":
		var ps []string
		for _, p := range strings.Split(*policies, ",") {
			if p = strings.TrimSpace(p); p != "" {
				ps = append(ps, p)
			}
		}
		out, err := c.ACLCreateToken(ctx, api.ACLTokenRequest{Name: *name, Policies: ps, NoSecret: *noSecret, Replace: *replce})
		if ae := (*client.APIError)(nil); errors.As(err, &ae) && ae.Code == api.CodeAlreadyExists {
			return answerNo("%s: a principal named %q exists; pass --replace to give it a new token (its old one stops working)", what, *name)
		}
		if err != nil {
			return clientFail(what, err)
		}
		return print(out, func() {
			if out.Secret != "" {
				fmt.Fprintln(e.stdout, out.Secret)
			}
		})
	case "token list":
		out, err := c.ACLTokens(ctx)
		if err != nil {
			return clientFail(what, err)
		}
		return print(out, func() {
			tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tPOLICIES\tTOKEN")
			for _, p := range out.Principals {
				tok := "yes"
				if !p.HasToken {
					tok = "no (certificate)"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\n", p.Name, strings.Join(p.Policies, ","), tok)
			}
			tw.Flush()
		})
	case "token delete":
		if err := c.ACLDeleteToken(ctx, *name); err != nil {
			return clientFail(what, err)
		}
		return print(api.ACLDeleted{Deleted: *name}, func() {})
	case "policy set":
		p := api.ACLPolicy{Name: policyName, Rules: wireRules}
		if err := c.ACLSetPolicy(ctx, p); err != nil {
			return clientFail(what, err)
		}
		return print(p, func() {})
	case "policy list":
		out, err := c.ACLPolicies(ctx)
		if err != nil {
			return clientFail(what, err)
		}
		return print(out, func() {
			for _, p := range out.Policies {
				var rs []string
				for _, r := range p.Rules {
					rule := fmt.Sprintf("%s:%s", r.Prefix, strings.Join(r.Verbs, ","))
					if r.Deny {
						rule += ":deny"
					}
					rs = append(rs, fmt.Sprintf("%q", rule))
				}
				fmt.Fprintf(e.stdout, "%s\t%s\n", p.Name, strings.Join(rs, " "))
			}
		})
	case "policy delete":
		if err := c.ACLDeletePolicy(ctx, policyName); err != nil {
			return clientFail(what, err)
		}
		return print(api.ACLDeleted{Deleted: policyName}, func() {})
	}
	return nil
}
