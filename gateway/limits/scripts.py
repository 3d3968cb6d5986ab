"""The Lua scripts that make limits exact across gateway replicas: one atomic call per admission
(every applicable limit checked first, then all applied, or none), one per settlement. Time is Redis
server time (``TIME``), so replica clocks never matter. Every key of one call shares a hash tag (the
team's), so the scripts run unchanged on Redis Cluster.

ARGV is one JSON array (one argument to pack instead of dozens: argument packing dominates the
client-side cost of a script call): ``[[kind, limit, param], ..., extra...]``, KEYS in the same order
as the triples. Limit kinds:

* ``rpm``  GCRA: the key holds the theoretical arrival time (ms); ``param`` is the burst (requests
  that may arrive at once); one request is admitted every ``60000/limit`` ms after that.
* ``tpm``  token bucket of ``limit`` tokens refilled over a minute; ``param`` is this request's
  estimate, reserved now and corrected at settlement (the bucket may go into debt).
* ``conc`` a sorted set of leases scored by expiry (ms); ``param`` is the lease id; a lease not
  renewed within its TTL (a crashed gateway) stops counting.
* ``bud``  a budget (``gateway.limits.budget_rules``): ``[bud, limit, want, fields, add, soft, oldest, ttl,
  money, held]``; the window's fields summed plus ``want`` (the worst case) must fit ``limit``, then
  ``want`` is added to field ``add``. A soft budget admits anyway. The reservation is also held as
  ``held`` (``<lease>|<field>|<want>``), a member of the sorted set ``<key>:held`` scored by its expiry
  (ms), renewed while the request runs (RENEW); an admission first takes back every reservation whose
  holder stopped renewing it (a gateway that died), so a budget's room returns within the lease TTL.
  Settlement adds the real cost and takes back the reservations it names (``held``: a list there)
  that are still held: each reservation leaves exactly once, by settlement or by expiry. An
  admission with budgets answers ``{0 | 2, i, 0, spent_1, ...}`` (2: soft budget ``i`` went past its
  limit; per limit, a budget's spend with this request's worst case, 0 for the other kinds) and a
  budget's refusal ``{1, i, -2, room}``.

Admission returns ``{0}``, or ``{1, i, retry_ms}`` naming the first refusing limit (1-based),
``retry_ms = -1`` when the request can never fit (an estimate larger than the whole bucket). An
admission made ahead of its requests (``gateway.limits.advance``: ``extra`` is ``[ttl, k]``) admits
up to ``k`` of them at once, *units*, as many as leave every limit at least half its room (none:
refused); unit ``u``'s concurrency lease is ``<lease>.<u>``. It is answered with
``{0, now_ms, units, mark_1, ...}``: per limit, the arrival time it set (rpm, for GIVE_BACK), the
budget's spend with every unit's worst case (bud, for the gauges), 0 for the other kinds. Under a
budget each unit holds its own reservation of the worst case, ``<lease>.<u>|<field>|<want>`` (what the
request that takes the unit settles or renews, and its expiry takes back), and units are granted only
while they leave half the budget's remaining room: a budget, soft or hard, never goes past its limit
by an admission made ahead (a request that would take it past is admitted on its own path).
"""

from __future__ import annotations

from gateway.limits.budget_rules import PRUNE_AFTER

# How long a settlement's script call whose answer was lost (it may have run) is sent again as it
# was: past it, whether it ran cannot be known (``gateway.limits.failover``). Four lease TTLs (30 s)
# cover a Redis that stalls (a fork, a slow command) or fails over to a replica.
ONCE_HOLD_SECONDS = 120
# How long SETTLE remembers a call's id: five times the hold, so a call sent again at the end of it
# that Redis runs late (a stall again) still finds the record. Each settlement call leaves one
# (about 134 bytes in Redis 7.0): 80 MB per 1,000 calls a second across the replicas, fewer with
# settlements summed per team key (``store._merged``).
ONCE_TTL_SECONDS = 5 * ONCE_HOLD_SECONDS

# Every script reads Redis's clock (ms), and all but RENEW their one JSON argument as ``a``.
CLOCK = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""
PRELUDE = (
    CLOCK
    + """local a = cjson.decode(ARGV[1])
"""
)
# The token bucket of a ``tpm`` key, for the scripts that read or write one: its level refilled to
# now (never above the limit), and a new level written as of now.
BUCKET = """local function refilled(key, limit)
  local h = redis.call('HMGET', key, 'level', 'ts')
  local level, ts = tonumber(h[1] or limit), tonumber(h[2] or now)
  return math.min(limit, level + (now - ts) * limit / 60000)
end
local function put_level(key, level)
  redis.call('HSET', key, 'level', level, 'ts', now)
  redis.call('PEXPIRE', key, 120000)
end
"""

# A budget hash (``gateway.limits.budget_rules``): ``spend`` adds to one period's field and keeps the hash
# alive; ``prune`` drops the fields of periods before ``oldest`` once there are many.
BUDGET = (
    """local function spend(key, fieldname, amount, ttl)
  if amount ~= 0 then redis.call('HINCRBY', key, fieldname, amount) end
  redis.call('EXPIRE', key, ttl)
end
local function hold(key, member, ttl_ms, keep)
  if member == '' then return end
  local held = key .. ':held'
  redis.call('ZADD', held, now + ttl_ms, member)
  redis.call('EXPIRE', held, keep)
end
local function reclaim(key)
  local held = key .. ':held'
  local gone = redis.call('ZRANGEBYSCORE', held, '-inf', now, 'LIMIT', 0, 256)
  for _, m in ipairs(gone) do
    local f, amount = string.match(m, '^[^|]*|(.+)|(%d+)$')
    if f and redis.call('HEXISTS', key, f) == 1 then redis.call('HINCRBY', key, f, '-' .. amount) end
  end
  if #gone > 0 then redis.call('ZREM', held, unpack(gone)) end
end
local function release(key, members)
  local back = 0
  for _, m in ipairs(members) do
    if redis.call('ZREM', key .. ':held', m) == 1 then back = back + tonumber(string.match(m, '(%d+)$')) end
  end
  return back
end
local function prune(key, oldest)
  if redis.call('HLEN', key) > """
    + str(PRUNE_AFTER)
    + """ then
    for _, f in ipairs(redis.call('HKEYS', key)) do
      local start = tonumber(string.match(f, '^(%d+):'))
      if start and start < oldest then redis.call('HDEL', key, f) end
    end
  end
end
"""
)

ADMIT = (
    PRELUDE
    + BUCKET
    + BUDGET
    + """local n = #KEYS
local ttl = tonumber(a[n + 1])
local ahead = tonumber(a[n + 2] or 0)
local units = math.max(ahead, 1)
local state = {}
local spent, over = nil, nil
for i = 1, n do if a[i][1] == 'bud' then spent = {} end end
for i = 1, n do
  local kind, limit, param = a[i][1], tonumber(a[i][2]), tostring(a[i][3])
  local fits
  if kind == 'rpm' then
    local period = 60000 / limit
    local tat = tonumber(redis.call('GET', KEYS[i]) or '0')
    if tat < now then tat = now end
    local new_tat = tat + period
    local room = tonumber(param) * period
    if ahead > 0 then room = room / 2 end
    if new_tat - now > room then
      return {1, i, math.ceil(new_tat - now - room)}
    end
    fits = 1 + math.floor((room - (new_tat - now)) / period)
    state[i] = tat
  elseif kind == 'tpm' then
    local want = tonumber(param)
    if want > limit then return {1, i, -1} end
    local level = refilled(KEYS[i], limit)
    if level < want or (ahead > 0 and (level - want) * 2 < limit) then
      return {1, i, math.ceil(math.max(want - level, 1) * 60000 / limit)}
    end
    fits = 1
    if ahead > 0 then
      fits = want > 0 and 1 + math.floor((level - want - limit / 2) / want) or units
    end
    state[i] = level
  elseif kind == 'bud' then
    reclaim(KEYS[i])
    local want, used = tonumber(param), 0
    for _, v in ipairs(redis.call('HMGET', KEYS[i], unpack(a[i][4]))) do used = used + (tonumber(v) or 0) end
    if used + want > limit then
      if a[i][6] == 0 or ahead > 0 then return {1, i, -2, limit - used} end
      over = over or i
    end
    fits = units
    if ahead > 0 and want > 0 then
      fits = math.floor((limit - used) / (2 * want))
      if fits < 1 then return {1, i, -2, limit - used} end
    end
    state[i] = used
    spent[i] = used + want
  else
    redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now)
    local held = redis.call('ZCARD', KEYS[i])
    fits = ahead > 0 and math.floor(limit / 2 - held) or limit - held
    if fits < 1 then
      return {1, i, 100}
    end
  end
  if fits < units then units = fits end
end
local marks = ahead > 0 and {0, now, units} or nil
for i = 1, n do
  local kind, limit, param = a[i][1], tonumber(a[i][2]), a[i][3]
  if marks then marks[i + 3] = 0 end
  if kind == 'rpm' then
    local tat = state[i] + units * 60000 / limit
    redis.call('SET', KEYS[i], tat, 'PX', math.ceil(tat - now) + 1000)
    if marks then marks[i + 3] = math.floor(tat) end
  elseif kind == 'tpm' then
    put_level(KEYS[i], state[i] - units * tonumber(param))
  elseif kind == 'bud' then
    spend(KEYS[i], a[i][5], units * tonumber(param), a[i][8])
    if marks then
      local lease, rest = string.match(a[i][10], '^([^|]*)(|.*)$')
      if lease then
        for u = 1, units do hold(KEYS[i], lease .. '.' .. u .. rest, ttl, a[i][8]) end
      end
      marks[i + 3] = state[i] + units * tonumber(param)
    else
      hold(KEYS[i], a[i][10], ttl, a[i][8])
    end
    prune(KEYS[i], a[i][7])
  elseif ahead > 0 then
    local members = {}
    for u = 1, units do
      members[2 * u - 1] = now + ttl
      members[2 * u] = tostring(param) .. '.' .. u
    end
    redis.call('ZADD', KEYS[i], unpack(members))
    redis.call('PEXPIRE', KEYS[i], ttl * 2)
  else
    redis.call('ZADD', KEYS[i], now + ttl, tostring(param))
    redis.call('PEXPIRE', KEYS[i], ttl * 2)
  end
end
if spent and not marks then
  local out = {over and 2 or 0, over or 0, 0}
  for i = 1, n do out[i + 3] = spent[i] or 0 end
  return out
end
return marks or {0}
"""
)

# KEYS and ARGV[1]: an admission's. A request admitted in process while Redis was out (``on_failure:
# open``) and still running when it answers again, added as ADMIT would have applied it, unchecked (it
# is running already): its concurrency lease, its token estimate taken from the bucket (which may go
# into debt), its budgets' worst case added and held, renewed and settled like any other. So the
# limits count it until it ends, and a budget is not walked past across an outage. An arrival is not
# added: the process's share counted it. A reservation already held (the same call sent twice) is
# not added again.
ADOPT = (
    PRELUDE
    + BUCKET
    + BUDGET
    + """local n = #KEYS
local ttl = tonumber(a[n + 1])
for i = 1, n do
  local kind, limit, param = a[i][1], tonumber(a[i][2]), a[i][3]
  if kind == 'bud' then
    reclaim(KEYS[i])
    if a[i][10] == '' or not redis.call('ZSCORE', KEYS[i] .. ':held', a[i][10]) then
      spend(KEYS[i], a[i][5], tonumber(param), a[i][8])
      hold(KEYS[i], a[i][10], ttl, a[i][8])
    end
  elseif kind == 'tpm' then
    put_level(KEYS[i], refilled(KEYS[i], limit) - tonumber(param))
  elseif kind == 'conc' then
    redis.call('ZADD', KEYS[i], now + ttl, tostring(param))
    redis.call('PEXPIRE', KEYS[i], ttl * 2)
  end
end
return 0
"""
)

# KEYS: the same keys as the admission, then the usage hash, then the call's id record
# (``llmgw:{team}:settled:<id>``). ARGV[1]: JSON of the triples as admitted (a concurrency triple's
# param: one lease, or a list of the leases of every request settled together), then the correction
# (actual - estimate) tokens, requests, prompt and completion counts for usage, the key id, and the
# usage bucket's TTL (s); then, with budgets or prices, what the requests really spent (money,
# tokens; a budget triple's last element: the reservations to take back), the cost, and the model
# and target it is counted under (none: unpriced). Answers 0.
#
# Applied once per id: a call sent again because its answer was lost (``gateway.limits.failover``)
# finds its record and answers 1, changing nothing. The record is set first, in the same atomic call
# as the charges, so whatever state Redis keeps or loses (a snapshot, an AOF, a replica's copy) has
# both or neither: after a restart that lost the call, a call sent again charges once. It lives
# ``ONCE_TTL_SECONDS``, well past the longest a call is sent again (``ONCE_HOLD_SECONDS``).
SETTLE = (
    PRELUDE
    + """if not redis.call('SET', KEYS[#KEYS], 1, 'NX', 'EX', """
    + str(ONCE_TTL_SECONDS)
    + """) then return 1 end
"""
    + BUCKET
    + BUDGET
    + """local n = #KEYS - 2
local correction = tonumber(a[n + 1])
local money, spent_tokens = tonumber(a[n + 7] or 0), tonumber(a[n + 8] or 0)
for i = 1, n do
  local kind, limit, param = a[i][1], tonumber(a[i][2]), a[i][3]
  if kind == 'tpm' and correction ~= 0 then
    put_level(KEYS[i], refilled(KEYS[i], limit) - correction)
  elseif kind == 'bud' then
    local real = a[i][9] == 1 and money or spent_tokens
    spend(KEYS[i], a[i][5], real - release(KEYS[i], a[i][10]), a[i][8])
  elseif kind == 'conc' then
    if type(param) == 'table' then
      for j = 1, #param, 1000 do
        redis.call('ZREM', KEYS[i], unpack(param, j, math.min(j + 999, #param)))
      end
    else
      redis.call('ZREM', KEYS[i], tostring(param))
    end
  end
end
local usage = KEYS[n + 1]
local requests, prompt, completion = a[n + 2], a[n + 3], a[n + 4]
local key_id = a[n + 5]
redis.call('HINCRBY', usage, 'requests', requests)
redis.call('HINCRBY', usage, 'prompt_tokens', prompt)
redis.call('HINCRBY', usage, 'completion_tokens', completion)
redis.call('HINCRBY', usage, 'key:' .. key_id .. ':requests', requests)
redis.call('HINCRBY', usage, 'key:' .. key_id .. ':prompt_tokens', prompt)
redis.call('HINCRBY', usage, 'key:' .. key_id .. ':completion_tokens', completion)
local cost, model, target = tonumber(a[n + 9] or 0), a[n + 10], a[n + 11]
if model then
  redis.call('HINCRBY', usage, 'spend', cost)
  redis.call('HINCRBY', usage, 'key:' .. key_id .. ':spend', cost)
  redis.call('HINCRBY', usage, 'model:' .. model .. ':spend', cost)
  redis.call('HINCRBY', usage, 'target:' .. target .. ':spend', cost)
end
redis.call('EXPIRE', usage, tonumber(a[n + 6]))
return 0
"""
)

# KEYS: an admission's. ARGV[1]: its triples, but an rpm triple's param is the arrival time the
# admission set (its last unit's), a concurrency triple's the leases of the units given back, a budget
# triple's last element those units' reservations (taken back only while still held, as SETTLE does:
# each leaves once, by settlement, giving back or expiry); then the Redis time it was made at, then
# how many of its units come back: what ADMIT answered an ``ahead`` admission with, less the units
# requests took. Undoes those units of an admission made ahead (``gateway.limits.advance``), never by
# more than it still holds: arrivals only by the part time has not paid off yet, tokens less the
# refill since (which a bucket at its cap would have lost), so giving back never lets more in than if
# those units had never been admitted.
GIVE_BACK = (
    PRELUDE
    + BUCKET
    + BUDGET
    + """local n = #KEYS
local made, units = tonumber(a[n + 1]), tonumber(a[n + 2])
for i = 1, n do
  local kind, limit, param = a[i][1], tonumber(a[i][2]), a[i][3]
  if kind == 'rpm' then
    local back = math.min(units * 60000 / limit, tonumber(param) - now)
    local tat = tonumber(redis.call('GET', KEYS[i]) or '0')
    if back > 0 and tat > now then
      tat = math.max(now, tat - back)
      redis.call('SET', KEYS[i], tat, 'PX', math.ceil(tat - now) + 1000)
    end
  elseif kind == 'tpm' then
    local back = math.max(0, units * tonumber(param) - (now - made) * limit / 60000)
    put_level(KEYS[i], math.min(limit, refilled(KEYS[i], limit) + back))
  elseif kind == 'bud' then
    spend(KEYS[i], a[i][5], -release(KEYS[i], a[i][10]), a[i][8])
  elseif #param > 0 then
    redis.call('ZREM', KEYS[i], unpack(param))
  end
end
return 0
"""
)

# KEYS: concurrency keys and budgets' ``<key>:held`` sets; ARGV: the TTL (ms), then the member each
# holds (a lease id, a budget's reservation). Keeps the leases and reservations of live requests from
# expiring; one already taken back stays gone (XX).
RENEW = (
    CLOCK
    + """for i = 1, #KEYS do
  redis.call('ZADD', KEYS[i], 'XX', now + tonumber(ARGV[1]), ARGV[i + 1])
end
return 0
"""
)
