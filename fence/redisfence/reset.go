package redisfence

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/fencelock/fencelock/fence"
)

// resetScript is Reset, run by Redis as one command: the mark read,
// lowered (or, with ARGV[2] "1", raised) or forgotten, and the reset
// appended to the stream KEYS[2], with nothing in between.
//
// KEYS[1] is the mark, KEYS[2] its resets stream (one hash slot). ARGV:
// the token to set ("0": forget the mark), "1" to allow a raise, the OS
// user, the reason, the resource. Replies: {"nomark"}, {"raises", mark
// fields...} (refused), or {"done", mark fields...}, the mark fields being
// token, write, key and raised_ms as they were.
const resetScript = `
local function less(a, b)
  if #a ~= #b then return #a < #b end
  return a < b
end
local m = redis.call('HMGET', KEYS[1], 'token', 'write', 'key', 'raised_ms')
if not m[1] then return {'nomark'} end
local hi, to = m[1], ARGV[1]
local last = m[2] or hi
local key = m[3] or ''
local was = {hi, last, key, m[4] or ''}
if less(hi, to) and ARGV[2] ~= '1' then return {'raises', unpack(was)} end
local after = to
if less(last, to) then after = last end
local t = redis.call('TIME')
local ms = tostring(tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
if to == '0' then
  redis.call('DEL', KEYS[1])
else
  redis.call('HSET', KEYS[1], 'token', to, 'write', after, 'raised_ms', ms)
end
redis.call('XADD', KEYS[2], '*', 'at_ms', ms, 'os_user', ARGV[3], 'reason', ARGV[4], 'resource', ARGV[5],
  'token_before', hi, 'write_token_before', last, 'token_after', to, 'write_token_after', after, 'lock_key', key)
return {'done', unpack(was)}
`

var resetScriptSHA = func() string {
	sum := sha1.Sum([]byte(resetScript))
	return hex.EncodeToString(sum[:])
}()

// ResetsKey is the stream Reset records resource's resets in, in the
// hash slot of its mark: "fencelock:resets:{" + resource + "}" by
// default; with WithMarkKey, the mark's key followed by ":resets" (with
// the mark's key in braces when it has no hash tag of its own). Each entry
// has the fields at_ms, os_user, reason, resource, token_before,
// write_token_before, token_after (0: the mark was forgotten),
// write_token_after and lock_key; XRANGE lists them.
func (f *Fence) ResetsKey(resource string) string {
	if f.markKey == nil {
		return "fencelock:resets:{" + resource + "}"
	}
	mk := f.MarkKey(resource)
	if _, ok := hashTag(mk); ok {
		return mk + ":resets"
	}
	return "{" + mk + "}:resets"
}

// Reset mends resource's mark (fence.ResetRequest: lowered only, unless
// r.Raise; To 0 forgets it, its binding included) and appends the reset to
// ResetsKey, in one script: both or neither. It answers the mark as it
// was. A resource with no mark is fence.ErrNoMark; a raise not asked for,
// fence.ErrResetRaises. Every fenced write after it is checked against
// the mark as reset: its script reads it.
func (f *Fence) Reset(ctx context.Context, r fence.ResetRequest) (Mark, error) {
	if r.To > math.MaxInt64 {
		return Mark{}, fmt.Errorf("redisfence: token %d is above 2^63-1", r.To)
	}
	if f.markKey == nil && (r.Resource == "" || strings.ContainsAny(r.Resource, "{}")) {
		return Mark{}, fmt.Errorf("redisfence: resource %q: want a non-empty name without braces (it is the mark's hash tag)", r.Resource)
	}
	raise := "0"
	if r.Raise {
		raise = "1"
	}
	tail := []string{"2", f.MarkKey(r.Resource), f.ResetsKey(r.Resource), strconv.FormatUint(r.To, 10), raise, r.User, r.Reason, r.Resource}
	reply, err := f.c.Do(ctx, append([]string{"EVALSHA", resetScriptSHA}, tail...)...)
	var re *Error
	if errors.As(err, &re) && strings.HasPrefix(re.Msg, "NOSCRIPT") {
		reply, err = f.c.Do(ctx, append([]string{"EVAL", resetScript}, tail...)...)
	}
	if err != nil {
		return Mark{}, fmt.Errorf("redisfence: resetting the mark of %q: %w", r.Resource, err)
	}
	vals, _ := reply.([]any)
	tag := ""
	if len(vals) > 0 {
		tag, _ = vals[0].(string)
	}
	switch {
	case tag == "nomark":
		return Mark{}, fmt.Errorf("%w %q at %s", fence.ErrNoMark, r.Resource, f.MarkKey(r.Resource))
	case (tag == "raises" || tag == "done") && len(vals) == 5:
		m, err := markOf(r.Resource, vals[1], vals[2], vals[3], vals[4])
		if err != nil {
			return Mark{}, err
		}
		was := Mark{Token: m.highest, LastWrite: m.last, Key: m.bound}
		if m.raisedMS != 0 {
			was.Raised = time.UnixMilli(m.raisedMS)
		}
		if tag == "raises" {
			return was, r.Check(was.Token)
		}
		return was, nil
	}
	return Mark{}, fmt.Errorf("redisfence: resetting the mark of %q: unexpected reply %v", r.Resource, reply)
}
