package service

import (
	"net"
	"strconv"
	"strings"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/locktable"
)

// Validation of request fields, shared by the operations. Each error
// names the field at fault in the API's terms.

func checkKey(field, key string) *Error {
	switch {
	case key == "":
		return Invalid(field, "%s is required", field)
	case len(key) > api.MaxKeyLen:
		return Invalid(field, "%s is %d bytes; the limit is %d", field, len(key), api.MaxKeyLen)
	}
	return nil
}

func checkHolder(holder string) *Error {
	switch {
	case holder == "":
		return Invalid("holder", "holder is required")
	case len(holder) > api.MaxHolderLen:
		return Invalid("holder", "holder is %d bytes; the limit is %d", len(holder), api.MaxHolderLen)
	}
	return nil
}

func checkTTL(ttlMs int64) (locktable.Duration, *Error) {
	if ttlMs < api.MinTTL.Milliseconds() || ttlMs > api.MaxTTL.Milliseconds() {
		return 0, Invalid("ttl_ms", "ttl_ms must be between %d and %d", api.MinTTL.Milliseconds(), api.MaxTTL.Milliseconds())
	}
	return locktable.Duration(api.Duration(ttlMs)), nil
}

func checkWait(waitMs int64) *Error {
	if waitMs < 0 || waitMs > api.MaxWait.Milliseconds() {
		return Invalid("wait_ms", "wait_ms must be between 0 and %d", api.MaxWait.Milliseconds())
	}
	return nil
}

func checkRequestID(id string) *Error {
	if len(id) > api.MaxRequestIDLen {
		return Invalid("request_id", "request_id is %d bytes; the limit is %d", len(id), api.MaxRequestIDLen)
	}
	return nil
}

func checkPrefix(prefix string) *Error {
	if len(prefix) > api.MaxKeyLen {
		return Invalid("prefix", "prefix is %d bytes; the limit is %d", len(prefix), api.MaxKeyLen)
	}
	return nil
}

func checkNodeField(field, v string, limit int) *Error {
	switch {
	case v == "":
		return Invalid(field, "%s is required", field)
	case len(v) > limit:
		return Invalid(field, "%s is %d bytes; the limit is %d", field, len(v), limit)
	}
	return nil
}

// checkClientAddr refuses a client address that is not host:port: a
// name or an IP address and a port from 1 to 65535. The members table
// hands it to clients and to the dashboard as a link to the leader, so
// it must not be any string a caller chose.
func checkClientAddr(addr string) *Error {
	if e := checkNodeField("client_addr", addr, api.MaxAddrLen); e != nil {
		return e
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return Invalid("client_addr", "client_addr %q is not host:port", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port {
		return Invalid("client_addr", "client_addr %q: the port must be a number from 1 to 65535", addr)
	}
	if net.ParseIP(host) != nil {
		return nil
	}
	if host == "" {
		return Invalid("client_addr", "client_addr %q has no host", addr)
	}
	for _, label := range strings.Split(strings.TrimSuffix(host, "."), ".") {
		ok := label != "" && len(label) <= 63 && label[0] != '-' && label[len(label)-1] != '-'
		for i := 0; ok && i < len(label); i++ {
			c := label[i]
			ok = c == '-' || c == '_' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
		}
		if !ok {
			return Invalid("client_addr", "client_addr %q: the host must be an IP address or a DNS name", addr)
		}
	}
	return nil
}

func firstErr(errs ...*Error) *Error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
