// Package redisfence fences writes to Redis used as the protected store
// (caches, counters, job state): a fenced write is one server-side Lua
// script that checks the resource's mark, raises it and performs the
// write, so that nothing else runs between the check and the write, on
// one server or a Redis Cluster node.
//
//	f := redisfence.New(redisfence.NewClient("127.0.0.1:6379"))
//	_, err := f.Write(ctx, "acct:42", token,
//	    redisfence.HSet("{acct:42}:profile", "owner", "alice"),
//	    redisfence.IncrBy("{acct:42}:balance", 100),
//	    redisfence.XAdd("{acct:42}:log", "*", "op", "deposit", "amount", "100"))
//
// The mark of a resource is a hash at MarkKey(resource), by default
// "fencelock:mark:{resource}", with fields token (the highest token
// honoured, reads included), write (the last write's token), key (the
// lock key it is bound to) and raised_ms. The rule is fence.Fence's: no
// token is refused (fence.ErrMissingToken), a token below the mark is
// refused (*fence.StaleTokenError) and nothing is written, an equal or
// higher one is admitted, the mark rises to it and the ops run, in order.
// Read admits a read/write lock's reader (fence.RWFence's rule): at least
// the last write's token, raising token only.
//
// Redis Cluster runs a script on one node only, and every key it touches
// must be declared and in one hash slot. The fence declares them all
// (KEYS), and refuses before sending anything an op whose key is not in
// the mark's slot (ErrCrossSlot): put the resource in braces in each data
// key, "{acct:42}:balance", which is the mark's hash tag. The check holds
// on a single server too, so code keeps working when it moves to Cluster.
// (Client does not follow MOVED: point it at the node owning the slot.)
//
// Redis does not roll a script back. The ops are checked before the
// script is sent (known commands, one key each, in the slot); one that
// fails inside it all the same (WRONGTYPE) stops the script there: the
// mark stays raised (a newer holder has shown up, as fence.Fence says)
// and the ops before it stay done. Write returns an *OpError.
//
// Durability is the server's: with appendonly yes and appendfsync always
// a mark is on disk before the script's reply, and survives a crash; with
// everysec a crash can lose the last second of marks, and a zombie's
// stale write that the lost mark refused could be admitted after it.
//
// Verification (WithVerification) is package fence's, in its steps
// (fence.Verification), with the script as the resource's lock: the mark
// is read (HMGET), a stale token refused, and Verification.Ask asks the
// lock service about a token that needs it, bounded by
// Verification.Timeout (past it a *fence.UnavailableError); nothing
// waits on Redis meanwhile. Verification.Confirm (which never asks)
// decides on that mark, and the script, which reads the mark again and
// refuses a stale token, runs the write only if the mark it finds is one
// on which Confirm decides the same (the same binding; and, for a token
// that was not asked about, still one that needs no question). Else it
// answers "moved" with the mark it found: Confirm on that mark gives the
// refusal (another key bound the resource meanwhile: *fence.WrongKeyError)
// or fence.ErrReverify, and the fence starts again from the read, at most
// fence.MaxReverify times. A current holder (its token equal to a mark
// that records a key) is never asked about, so it goes on writing while
// the lock service is unreachable. A resource is bound to the key
// recorded with its mark, else to the one the configuration names
// (Verification.Key); one bound to none is refused (fence.ErrUnbound)
// unless Verification.BindOnFirstUse.
//
// Reset mends a mark (lowers it, unless asked to raise it) and records
// the reset in a stream beside it, ResetsKey, in the same script;
// `fencelock fence reset --redis ADDR` runs it.
//
// The script is sent by EVALSHA, and by EVAL (which caches it) when the
// server answers NOSCRIPT (after a restart or SCRIPT FLUSH). Tokens are
// refused above 2^63-1, as the SQL fences refuse them.
package redisfence

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/fencelock/fencelock/fence"
)

// ErrCrossSlot: an op's key is not in the hash slot of the resource's
// mark, which a script on Redis Cluster requires.
var ErrCrossSlot = errors.New("redisfence: key not in the mark's hash slot")

// Doer sends one command and returns its reply, as Client.Do does.
type Doer interface {
	Do(ctx context.Context, args ...string) (any, error)
}

// Op is one command of a fenced write or read, on one key.
type Op struct {
	cmd  string
	key  string
	args []string
}

// Commands an Op may carry: single-key commands, writes and reads.
var (
	writeCmds = map[string]bool{"SET": true, "DEL": true, "UNLINK": true, "INCRBY": true, "INCR": true, "DECRBY": true,
		"HSET": true, "HDEL": true, "HINCRBY": true, "XADD": true, "XTRIM": true, "EXPIRE": true, "PEXPIRE": true,
		"LPUSH": true, "RPUSH": true, "SADD": true, "SREM": true, "ZADD": true, "ZREM": true, "APPEND": true}
	readCmds = map[string]bool{"GET": true, "HGET": true, "HGETALL": true, "HMGET": true, "EXISTS": true, "TTL": true,
		"PTTL": true, "LRANGE": true, "LLEN": true, "SMEMBERS": true, "SCARD": true, "ZRANGE": true, "XRANGE": true,
		"XLEN": true, "STRLEN": true}
)

// Cmd is the command cmd on key with args, e.g. Cmd("EXPIRE", k, "60").
// cmd must be one of the single-key commands the package knows (SET, DEL,
// INCRBY, HSET, XADD, ... and, for Read, GET, HGETALL, XRANGE, ...).
func Cmd(cmd, key string, args ...string) Op {
	return Op{cmd: strings.ToUpper(cmd), key: key, args: args}
}

// Set is SET key value [args...], e.g. Set(k, v, "PX", "60000").
func Set(key, value string, args ...string) Op {
	return Cmd("SET", key, append([]string{value}, args...)...)
}

// HSet is HSET key field value [field value ...].
func HSet(key string, fieldValues ...string) Op { return Cmd("HSET", key, fieldValues...) }

// IncrBy is INCRBY key n.
func IncrBy(key string, n int64) Op { return Cmd("INCRBY", key, strconv.FormatInt(n, 10)) }

// Del is DEL key.
func Del(key string) Op { return Cmd("DEL", key) }

// XAdd is XADD key id field value [field value ...] (id "*": the
// server's).
func XAdd(key, id string, fieldValues ...string) Op {
	return Cmd("XADD", key, append([]string{id}, fieldValues...)...)
}

// Get is GET key.
func Get(key string) Op { return Cmd("GET", key) }

// HGetAll is HGETALL key.
func HGetAll(key string) Op { return Cmd("HGETALL", key) }

// OpError: op Index (0-based) of an admitted write failed inside the
// script. The mark was raised; the ops before it were done.
type OpError struct {
	Index int
	Cmd   string
	Key   string
	Msg   string
}

func (e *OpError) Error() string {
	return fmt.Sprintf("redisfence: op %d (%s %s) failed: %s (the mark was raised; the ops before it were done)", e.Index, e.Cmd, e.Key, e.Msg)
}

// Fence is a fenced writer of one Redis server (or Cluster node).
type Fence struct {
	c       Doer
	markKey func(resource string) string
	verify  *fence.Verification
}

// Option configures New.
type Option func(*Fence)

// WithMarkKey names the key of a resource's mark (default
// "fencelock:mark:{" + resource + "}"). Data keys must share its slot.
func WithMarkKey(fn func(resource string) string) Option { return func(f *Fence) { f.markKey = fn } }

// WithVerification makes the fence confirm each new token with the lock
// service before the script raises a mark, as package fence's
// Verification says (see the package comment). v says which lock key
// guards each resource (Key, or BindOnFirstUse) and bounds each question
// (Timeout); a v that binds nothing (fence.Verification.Validate)
// refuses every token with fence.ErrUnbound.
func WithVerification(v *fence.Verification) Option { return func(f *Fence) { f.verify = v } }

// New returns a Fence writing through c (a *Client).
func New(c Doer, opts ...Option) *Fence {
	f := &Fence{c: c}
	for _, o := range opts {
		o(f)
	}
	return f
}

// MarkKey is the key of resource's mark.
func (f *Fence) MarkKey(resource string) string {
	if f.markKey != nil {
		return f.markKey(resource)
	}
	return "fencelock:mark:{" + resource + "}"
}

// Write admits token for resource and runs ops, all in one script (see
// the package comment). It returns the ops' replies, in order.
func (f *Fence) Write(ctx context.Context, resource string, token uint64, ops ...Op) ([]any, error) {
	return f.run(ctx, resource, token, true, ops)
}

// Read admits a read/write lock reader's token for resource (at least the
// last write's; a higher one raises the mark writes are checked against)
// and runs ops, which must be reads.
func (f *Fence) Read(ctx context.Context, resource string, token uint64, ops ...Op) ([]any, error) {
	for i, op := range ops {
		if !readCmds[op.cmd] {
			return nil, fmt.Errorf("redisfence: op %d: %s is not a read (Read runs GET, HGETALL, XRANGE, ...)", i, op.cmd)
		}
	}
	return f.run(ctx, resource, token, false, ops)
}

// Mark is a resource's mark as stored.
type Mark struct {
	Token     uint64    // the highest token honoured, reads included
	LastWrite uint64    // the last write's token
	Key       string    // the lock key it is bound to ("": none)
	Raised    time.Time // when the mark last rose (zero: unknown)
}

// Mark reads resource's mark (the zero Mark if there is none).
func (f *Fence) Mark(ctx context.Context, resource string) (Mark, error) {
	m, err := f.readMark(ctx, resource)
	if err != nil {
		return Mark{}, err
	}
	out := Mark{Token: m.highest, LastWrite: m.last, Key: m.bound}
	if m.raisedMS != 0 {
		out.Raised = time.UnixMilli(m.raisedMS)
	}
	return out, nil
}

type mark struct {
	highest, last uint64
	bound         string
	raisedMS      int64
}

func (f *Fence) readMark(ctx context.Context, resource string) (mark, error) {
	reply, err := f.c.Do(ctx, "HMGET", f.MarkKey(resource), "token", "write", "key", "raised_ms")
	if err != nil {
		return mark{}, fmt.Errorf("redisfence: reading the mark of %q: %w", resource, err)
	}
	vals, ok := reply.([]any)
	if !ok || len(vals) != 4 {
		return mark{}, fmt.Errorf("redisfence: reading the mark of %q: unexpected reply %v", resource, reply)
	}
	return markOf(resource, vals[0], vals[1], vals[2], vals[3])
}

// markOf reads the fields token, write, key and raised_ms of a mark as
// a script or HMGET answers them (nil or "": absent).
func markOf(resource string, token, write, key, raisedMS any) (mark, error) {
	var m mark
	var err error
	str := func(v any) string { s, _ := v.(string); return s }
	if s := str(token); s != "" {
		if m.highest, err = strconv.ParseUint(s, 10, 64); err != nil {
			return mark{}, fmt.Errorf("redisfence: the mark of %q holds token %q", resource, s)
		}
	}
	m.last = m.highest
	if s := str(write); s != "" {
		if m.last, err = strconv.ParseUint(s, 10, 64); err != nil {
			return mark{}, fmt.Errorf("redisfence: the mark of %q holds write %q", resource, s)
		}
	}
	m.bound = str(key)
	m.raisedMS, _ = strconv.ParseInt(str(raisedMS), 10, 64)
	return m, nil
}

func (m mark) stale(resource string, token uint64, write bool) error {
	switch {
	case write && m.highest > token:
		return &fence.StaleTokenError{Resource: resource, Token: token, Highest: m.highest}
	case !write && m.last > token:
		return &fence.StaleTokenError{Resource: resource, Token: token, Highest: m.last}
	}
	return nil
}

// check refuses what the script must never see: no token, one past
// 2^63-1, a resource that breaks the mark's hash tag, unknown commands,
// keys outside the mark's slot.
func (f *Fence) check(resource string, token uint64, ops []Op) error {
	if token == 0 {
		return fence.ErrMissingToken
	}
	if token > math.MaxInt64 {
		return fmt.Errorf("redisfence: token %d is above 2^63-1", token)
	}
	if f.markKey == nil && (resource == "" || strings.ContainsAny(resource, "{}")) {
		return fmt.Errorf("redisfence: resource %q: want a non-empty name without braces (it is the mark's hash tag)", resource)
	}
	slot := Slot(f.MarkKey(resource))
	for i, op := range ops {
		if !writeCmds[op.cmd] && !readCmds[op.cmd] {
			return fmt.Errorf("redisfence: op %d: %q is not a single-key command the fence runs", i, op.cmd)
		}
		if s := Slot(op.key); s != slot {
			return fmt.Errorf("%w: op %d's key %q is in slot %d, the mark of %q (%s) in %d: put {%s} in the key", ErrCrossSlot, i, op.key, s, resource, f.MarkKey(resource), slot, resource)
		}
	}
	return nil
}

func (f *Fence) run(ctx context.Context, resource string, token uint64, write bool, ops []Op) ([]any, error) {
	if err := f.check(resource, token, ops); err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		// The lock service is asked before the script: nothing waits for
		// it on Redis (fence.Verification).
		var pre *verified
		if f.verifying() {
			var err error
			if pre, err = f.ask(ctx, resource, token, write); err != nil {
				return nil, err
			}
		}
		out, err := f.eval(ctx, resource, token, write, pre, ops)
		var mv *movedError
		if errors.As(err, &mv) {
			err = f.moved(ctx, resource, token, pre, mv.found)
		}
		if !errors.Is(err, fence.ErrReverify) || attempt == fence.MaxReverify {
			return out, err
		}
	}
}

func (f *Fence) eval(ctx context.Context, resource string, token uint64, write bool, pre *verified, ops []Op) ([]any, error) {
	mode := "r"
	if write {
		mode = "w"
	}
	keys := []string{f.MarkKey(resource)}
	argv := []string{strconv.FormatUint(token, 10), mode, "", "0", "", "0", strconv.Itoa(len(ops))}
	if pre != nil {
		argv[2], argv[3], argv[4] = pre.key, "1", pre.seen.bound
		if pre.asked {
			argv[5] = "1"
		}
	}
	for _, op := range ops {
		keys = append(keys, op.key)
		argv = append(argv, op.cmd, strconv.Itoa(len(op.args)))
		argv = append(argv, op.args...)
	}
	tail := append(append([]string{strconv.Itoa(len(keys))}, keys...), argv...)
	reply, err := f.c.Do(ctx, append([]string{"EVALSHA", scriptSHA}, tail...)...)
	var re *Error
	if errors.As(err, &re) && strings.HasPrefix(re.Msg, "NOSCRIPT") {
		reply, err = f.c.Do(ctx, append([]string{"EVAL", script}, tail...)...)
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("redisfence: fenced write to %q: %w", resource, err)
	}
	vals, _ := reply.([]any)
	tag := ""
	if len(vals) > 0 {
		tag, _ = vals[0].(string)
	}
	switch {
	case tag == "ok" && len(vals) == 2:
		out, _ := vals[1].([]any)
		if len(out) != len(ops) {
			return nil, fmt.Errorf("redisfence: fenced write to %q: %d replies for %d ops", resource, len(out), len(ops))
		}
		return out, nil
	case tag == "stale" && len(vals) == 2:
		s, _ := vals[1].(string)
		hi, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("redisfence: the mark of %q holds token %q", resource, s)
		}
		return nil, &fence.StaleTokenError{Resource: resource, Token: token, Highest: hi}
	case tag == "moved" && len(vals) == 4:
		found, err := markOf(resource, vals[1], vals[2], vals[3], nil)
		if err != nil {
			return nil, err
		}
		return nil, &movedError{found: found}
	case tag == "opfail" && len(vals) == 3:
		k, _ := vals[1].(int64)
		msg, _ := vals[2].(string)
		i := int(k) - 1
		if i < 0 || i >= len(ops) {
			return nil, fmt.Errorf("redisfence: fenced write to %q: op %d failed: %s", resource, k, msg)
		}
		return nil, &OpError{Index: i, Cmd: ops[i].cmd, Key: ops[i].key, Msg: msg}
	}
	return nil, fmt.Errorf("redisfence: fenced write to %q: unexpected reply %v", resource, reply)
}
