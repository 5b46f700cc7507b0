package main

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strings"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/client"
)

// An error in the CLI's terms. The server and the client name the request
// field at fault (ttl_ms, wait_ms, key, ...) in the API's words; the user
// typed a flag or an argument. This table, the only place that knows both,
// says which, and for a range the rule in the flag's units.
type term struct {
	name string // --ttl, KEY
	rule string // the whole message for any refusal of the field, if fixed
}

var terms = map[string]term{
	"ttl_ms":      {"--ttl", fmt.Sprintf("must be between %s and %s", fmtDuration(api.MinTTL), fmtDuration(api.MaxTTL))},
	"wait_ms":     {"--wait", fmt.Sprintf("must be between 0s and %s", fmtDuration(api.MaxWait))},
	"key":         {"KEY", ""},
	"prefix":      {"PREFIX", ""},
	"holder":      {"--holder", ""},
	"token":       {"TOKEN", ""},
	"limit":       {"--limit", fmt.Sprintf("must be between 1 and %d (0: the server's default)", api.MaxLimit)},
	"addr":        {"--addr", ""},
	"id":          {"--id", ""},
	"raft_addr":   {"--raft", ""},
	"client_addr": {"--client", ""},
	// sessions, multi-key acquire, lock-delay
	"lock_delay_ms": {"--lock-delay", fmt.Sprintf("must be between 0s and %s", fmtDuration(api.MaxLockDelay))},
	"keys":          {"KEY", ""},
	"session":       {"--session", ""},
}

// termsFor returns the table with a command's own spellings: release
// takes the token as --token, not as an argument.
func termsFor(cmd string) map[string]term {
	if cmd != "release" {
		return terms
	}
	t := make(map[string]term, len(terms))
	for k, v := range terms {
		t[k] = v
	}
	t["token"] = term{name: "--token"}
	return t
}

// fieldRule is the message for a refusal of field, in CLI terms.
func fieldRule(field string) string {
	t := terms[field]
	return t.name + " " + t.rule
}

// inCLITerms rewrites a client error naming an API field in the words of
// cmd's flags and arguments; ok is false when err names no field.
func inCLITerms(cmd string, err error) (msg string, ok bool) {
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Field == "" {
		return "", false
	}
	t, known := termsFor(cmd)[ae.Field]
	if !known {
		return "", false
	}
	if t.rule != "" {
		return t.name + " " + t.rule, true
	}
	m := strings.TrimPrefix(ae.Message, "fencelock: ")
	re := regexp.MustCompile(`\b` + regexp.QuoteMeta(ae.Field) + `\b`)
	if re.MatchString(m) {
		return re.ReplaceAllLiteralString(m, t.name), true
	}
	return t.name + ": " + m, true
}

// checkDuration refuses d outside the range of field (ttl_ms, wait_ms)
// with the same message the server's refusal turns into.
func checkDuration(field string, d time.Duration) error {
	lo, hi := time.Duration(0), time.Duration(0)
	switch field {
	case "ttl_ms":
		lo, hi = api.MinTTL, api.MaxTTL
	case "wait_ms":
		lo, hi = 0, api.MaxWait
	case "lock_delay_ms":
		lo, hi = 0, api.MaxLockDelay
	}
	if d < lo || d > hi {
		return usageError("%s", fieldRule(field))
	}
	return nil
}

// fmtDuration prints d the way a user writes it: 100ms, 24h, 1h30m.
func fmtDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// clientFail turns a client error into the command's exit status, with
// what as the start of the one-line message: 2 for a refused argument
// (named as the user typed it) or a client set up wrong (an --addr that
// names no host, TLS), 3 when no server could answer, 7 when the ACLs
// refused the call, 8 over a quota, else 1.
func clientFail(what string, err error) error {
	cmd, _, _ := strings.Cut(what, " ")
	if errors.Is(err, client.ErrInvalid) {
		if msg, ok := inCLITerms(cmd, err); ok {
			return (&usageErr{cmd: cmd, message: msg}).exit()
		}
		return (&usageErr{cmd: cmd, message: fmt.Sprintf("%s: %s", what, trimPrefix(err))}).exit()
	}
	var in *interrupted
	if errors.As(err, &in) {
		return &exitError{Code: in.code(), Err: fmt.Errorf("%s: %v", what, in)}
	}
	var tm *client.TLSMismatchError
	if errors.As(err, &tm) {
		return (&usageErr{cmd: cmd, message: fmt.Sprintf("%s: %s", what, trimPrefix(err)), hint: tlsHint(tm)}).exit()
	}
	var te *client.TLSError
	if errors.As(err, &te) {
		return (&usageErr{cmd: cmd, message: fmt.Sprintf("%s: %s", what, trimPrefix(err)), hint: tlsErrorHint(te)}).exit()
	}
	var ns *client.NoServerError
	if errors.As(err, &ns) {
		if host := unknownHost(ns); host != "" {
			return (&usageErr{cmd: cmd, message: fmt.Sprintf("%s: --addr: no host is named %q (%s)", what, host, trimPrefix(err)),
				hint: "Give --addr (or FENCELOCK_ADDR) as HOST:PORT of a server, or several, comma-separated."}).exit()
		}
		return &exitError{Code: exitUnreachable, Err: fmt.Errorf("%s: %s; is a server running there? (--addr, FENCELOCK_ADDR)", what, trimPrefix(err))}
	}
	code := exitNo
	switch {
	case errors.Is(err, client.ErrUnreachable), errors.Is(err, client.ErrUnavailable),
		errors.Is(err, context.DeadlineExceeded):
		code = exitUnreachable
	case errors.Is(err, client.ErrPermissionDenied), errors.Is(err, client.ErrUnauthenticated):
		code = exitDenied
	case errors.Is(err, client.ErrQuotaExceeded):
		code = exitQuota
	}
	return &exitError{Code: code, Err: fmt.Errorf("%s: %s", what, trimPrefix(err))}
}

// unknownHost is the host name every address of ns failed to resolve, or
// "" when any failed otherwise.
func unknownHost(ns *client.NoServerError) string {
	host := ""
	for _, err := range ns.Errs {
		var de *net.DNSError
		if !errors.As(err, &de) || !de.IsNotFound {
			return ""
		}
		host = de.Name
	}
	return host
}

// tlsErrorHint says which flag mends a TLS handshake refused over
// certificates.
func tlsErrorHint(te *client.TLSError) string {
	var ua x509.UnknownAuthorityError
	var he x509.HostnameError
	var ci x509.CertificateInvalidError
	switch {
	case te.ClientCert && !te.HadCert:
		return "The server requires a client certificate: pass --cert FILE and --key FILE (or set FENCELOCK_CLIENT_CERT and FENCELOCK_CLIENT_KEY), signed by a CA the server trusts."
	case te.ClientCert:
		return "The server refused the client certificate in --cert (or asked for one signed by another CA): pass --cert FILE and --key FILE with one signed by a CA the server trusts (its --client-ca, or --ca)."
	case errors.As(te.Err, &ua):
		return "Pass --ca FILE (or set FENCELOCK_CLIENT_CA) with the CA that signed the server's certificate."
	case errors.As(te.Err, &he) && he.Certificate != nil:
		names := append([]string(nil), he.Certificate.DNSNames...)
		for _, ip := range he.Certificate.IPAddresses {
			names = append(names, ip.String())
		}
		if len(names) == 0 {
			return "The server's certificate names no host or address: it must be reissued with the names clients reach it by."
		}
		return fmt.Sprintf("The server's certificate is not for the address given: give --addr as a name the certificate holds (%s) with the port, or reissue it.", strings.Join(names, ", "))
	case errors.As(te.Err, &ci):
		return "The server's certificate is not valid (expired, not yet valid, or not for serving): it must be reissued."
	}
	return "Check --ca, --cert and --key against the server's certificates (docs/SECURITY.md)."
}

// trimPrefix drops the package prefix of client errors: main adds its own.
func trimPrefix(err error) string {
	return strings.ReplaceAll(err.Error(), "fencelock: ", "")
}

// tlsHint says what to pass when one side spoke TLS and the other did not.
func tlsHint(tm *client.TLSMismatchError) string {
	if tm.ServerTLS {
		return fmt.Sprintf("The server at %s speaks TLS, and was reached over plain HTTP: pass --ca FILE (or set FENCELOCK_CLIENT_CA) with the CA that signed its certificate, or give the address as https://%s if this machine trusts that CA.", tm.Host, tm.Host)
	}
	return fmt.Sprintf("The server at %s does not speak TLS, and was reached over TLS: give the address as http://%s (or host:port without --ca, --cert and --key).", tm.Host, tm.Host)
}
