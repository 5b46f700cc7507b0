package redisfence

import (
	"crypto/sha1"
	"encoding/hex"
)

// script is the fenced write, run by Redis as one command: nothing else
// runs between its check of the mark and its last op.
//
// KEYS[1] is the mark (a hash: token, write, key, raised_ms); KEYS[2..]
// the ops' keys, one each. ARGV: token, "w" or "r", the key to bind ("":
// none), "1" when the fence verifies, the binding of the mark
// fence.Verification.Confirm was given, "1" when the lock service was
// asked (and confirmed the token), the number of ops, then per op its
// command, its number of arguments and the arguments.
//
// Verifying, the script goes on only on a mark on which Confirm decides
// as it did: the same binding, and, for a token not asked about, a mark
// that still needs no question (the token at or below it, a key
// recorded); that is Ask's rule, needsAsk.
//
// Tokens are compared as decimal strings (length, then bytes): Lua's
// numbers are doubles, exact only to 2^53.
//
// Replies: {"stale", highest}, {"moved", token, write, key} (the mark it
// found, not one the verification covers), {"ok", replies}, or
// {"opfail", n, message} when op n failed (the mark stays raised, ops
// before n stay done).
const script = `
local function less(a, b)
  if #a ~= #b then return #a < #b end
  return a < b
end
local tok, mode = ARGV[1], ARGV[2]
local m = redis.call('HMGET', KEYS[1], 'token', 'write', 'key')
local hi = m[1] or '0'
local last = m[2] or hi
local bound = m[3] or ''
if mode == 'w' and less(tok, hi) then return {'stale', hi} end
if mode == 'r' and less(tok, last) then return {'stale', last} end
if ARGV[4] == '1' then
  if bound ~= ARGV[5] or (ARGV[6] ~= '1' and (less(hi, tok) or bound == '')) then
    return {'moved', hi, last, bound}
  end
end
local newhi, newlast = tok, tok
if mode == 'r' then
  newlast = last
  if less(tok, hi) then newhi = hi end
end
local set = {}
if newhi ~= hi or not m[1] then
  set[#set+1] = 'token'; set[#set+1] = newhi
  local t = redis.call('TIME')
  set[#set+1] = 'raised_ms'; set[#set+1] = tostring(tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
end
if newlast ~= last or not m[2] then set[#set+1] = 'write'; set[#set+1] = newlast end
if ARGV[3] ~= '' and bound == '' then set[#set+1] = 'key'; set[#set+1] = ARGV[3] end
if #set > 0 then redis.call('HSET', KEYS[1], unpack(set)) end
local out = {}
local i = 8
for k = 1, tonumber(ARGV[7]) do
  local n = tonumber(ARGV[i + 1])
  local args = {ARGV[i], KEYS[k + 1]}
  for j = 1, n do args[#args + 1] = ARGV[i + 1 + j] end
  i = i + 2 + n
  local r = redis.pcall(unpack(args))
  if type(r) == 'table' and r.err then return {'opfail', k, r.err} end
  out[k] = r
end
return {'ok', out}
`

var scriptSHA = func() string {
	sum := sha1.Sum([]byte(script))
	return hex.EncodeToString(sum[:])
}()
