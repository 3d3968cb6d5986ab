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

Admission returns ``{0}``, or ``{1, i, retry_ms}`` naming the first refusing limit (1-based),
``retry_ms = -1`` when the request can never fit (an estimate larger than the whole bucket). An
admission made ahead of its request (``gateway.limits.advance``: ``extra`` is ``[ttl, 1]``) is
granted only if every limit keeps at least half its room after it, and answered with
``{0, now_ms, mark_1, ...}``: per limit, the arrival time it set (rpm; 0 for the other kinds), for
GIVE_BACK.
"""

from __future__ import annotations

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

ADMIT = (
    PRELUDE
    + BUCKET
    + """local n = #KEYS
local ttl = tonumber(a[n + 1])
local ahead = a[n + 2] == 1
local state = {}
for i = 1, n do
  local kind, limit, param = a[i][1], tonumber(a[i][2]), tostring(a[i][3])
  if kind == 'rpm' then
    local period = 60000 / limit
    local burst = tonumber(param)
    local tat = tonumber(redis.call('GET', KEYS[i]) or '0')
    if tat < now then tat = now end
    local new_tat = tat + period
    local room = burst * period
    if ahead then room = room / 2 end
    if new_tat - now > room then
      return {1, i, math.ceil(new_tat - now - room)}
    end
    state[i] = new_tat
  elseif kind == 'tpm' then
    local want = tonumber(param)
    if want > limit then return {1, i, -1} end
    local level = refilled(KEYS[i], limit)
    if level < want or (ahead and (level - want) * 2 < limit) then
      return {1, i, math.ceil(math.max(want - level, 1) * 60000 / limit)}
    end
    state[i] = level - want
  else
    redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now)
    local held = redis.call('ZCARD', KEYS[i])
    if held >= limit or (ahead and (held + 1) * 2 > limit) then
      return {1, i, 100}
    end
  end
end
for i = 1, n do
  local kind = a[i][1]
  if kind == 'rpm' then
    redis.call('SET', KEYS[i], state[i], 'PX', math.ceil(state[i] - now) + 1000)
  elseif kind == 'tpm' then
    put_level(KEYS[i], state[i])
  else
    redis.call('ZADD', KEYS[i], now + ttl, tostring(a[i][3]))
    redis.call('PEXPIRE', KEYS[i], ttl * 2)
  end
end
if ahead then
  local marks = {0, now}
  for i = 1, n do marks[i + 2] = state[i] and a[i][1] == 'rpm' and math.floor(state[i]) or 0 end
  return marks
end
return {0}
"""
)

# KEYS: the same keys as the admission, then the usage hash. ARGV[1]: JSON of the triples as
# admitted (a concurrency triple's param: one lease, or a list of the leases of every request
# settled together), then the correction (actual - estimate) tokens, requests, prompt and completion
# counts for usage, the key id, and the usage bucket's TTL (s).
SETTLE = (
    PRELUDE
    + BUCKET
    + """local n = #KEYS - 1
local correction = tonumber(a[n + 1])
for i = 1, n do
  local kind, limit, param = a[i][1], tonumber(a[i][2]), a[i][3]
  if kind == 'tpm' and correction ~= 0 then
    put_level(KEYS[i], refilled(KEYS[i], limit) - correction)
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
redis.call('EXPIRE', usage, tonumber(a[n + 6]))
return 0
"""
)

# KEYS: an admission's. ARGV[1]: its triples, but an rpm triple's param is the arrival time the
# admission set (its ``new_tat``), then the Redis time it was made at: what ADMIT answered an ``ahead``
# admission with. Undoes an admission made ahead that no request took (``gateway.limits.advance``),
# never by more than it still holds: an arrival only by the part time has not paid off yet, tokens less
# the refill since (which a bucket at its cap would have lost), so giving back never lets more in than
# if the admission had never been made.
GIVE_BACK = (
    PRELUDE
    + BUCKET
    + """local n = #KEYS
local made = tonumber(a[n + 1])
for i = 1, n do
  local kind, limit, param = a[i][1], tonumber(a[i][2]), a[i][3]
  if kind == 'rpm' then
    local back = math.min(60000 / limit, tonumber(param) - now)
    local tat = tonumber(redis.call('GET', KEYS[i]) or '0')
    if back > 0 and tat > now then
      tat = math.max(now, tat - back)
      redis.call('SET', KEYS[i], tat, 'PX', math.ceil(tat - now) + 1000)
    end
  elseif kind == 'tpm' then
    local back = math.max(0, tonumber(param) - (now - made) * limit / 60000)
    put_level(KEYS[i], math.min(limit, refilled(KEYS[i], limit) + back))
  else
    redis.call('ZREM', KEYS[i], tostring(param))
  end
end
return 0
"""
)

# KEYS: concurrency keys; ARGV: lease id, TTL (ms). Keeps leases of live requests from expiring.
RENEW = (
    CLOCK
    + """for i = 1, #KEYS do
  redis.call('ZADD', KEYS[i], 'XX', now + tonumber(ARGV[2]), ARGV[1])
end
return 0
"""
)
