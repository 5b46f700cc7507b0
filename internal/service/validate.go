package service

import (
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
	return checkText(field, key)
}

func checkHolder(holder string) *Error {
	switch {
	case holder == "":
		return Invalid("holder", "holder is required")
	case len(holder) > api.MaxHolderLen:
		return Invalid("holder", "holder is %d bytes; the limit is %d", len(holder), api.MaxHolderLen)
	}
	return checkText("holder", holder)
}

// checkText refuses, in every configuration, a key, holder or prefix
// holding a character that is not shown as itself (api.BadText). The
// table and its snapshots are not checked: keys written before load,
// and end as their leases do.
func checkText(field, s string) *Error {
	if err := api.CheckText(field, s); err != nil {
		return Invalid(field, "%v", err)
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
	return checkText("prefix", prefix)
}

func firstErr(errs ...*Error) *Error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
