"""The shared fair queue's Lua script, its keys and its answers (``gateway.limits.fairq_shared`` makes
the calls; the Python twin of its order is ``gateway.limits.fairq``).

One Lua script does everything atomically, on Redis's clock. Its keys share the model's hash tag:

    gw:fq:{model}:run          ZSET  slot leases: request id → expiry (ms)
    gw:fq:{model}:alive        ZSET  waiters' leases: request id → expiry (ms)
    gw:fq:{model}:wait:<rank>  ZSET  waiters of a class: request id → start tag (start-time fair queuing)
    gw:fq:{model}:tag:<rank>   HASH  team → its last finish
    gw:fq:{model}:vt:<rank>    LIST  the starts last served, as many as the slots (at most 64): the
                                     class's virtual time is their lowest
    gw:fq:{model}:who          HASH  waiter id → team; ``#<id>`` → its arrival number (``~n``: the last)
    gw:fq:{model}:act:<rank>   ZSET  with ``queue.reserve``: team → its last arrival (ms), within the window
    gw:fq:{model}:blk          ZSET  the slots of ``run`` leased in blocks: slot id → expiry (ms)

A tag hash also counts each team's waiters (``q:<team>``), which the reserve asks (``fairq.Reserve``).

Equal start tags go in arrival order (the ``#<id>`` numbers), never by id, as in the Python twin.
"""

from __future__ import annotations

import hashlib

# KEYS: run, alive, wait:0..n-1, tag:0..n-1, vt:0..n-1, act:0..n-1, blk, who. ARGV: op
# (enter|check|leave|renew|lease|give), capacity, max_waiting, slot lease ms, channel, waiter lease
# ms, reserve slots, reserve window ms, block size, then per op: enter/check: id, rank, team, weight;
# leave: id, rank; renew, lease, give: the ids. Answers: {1} granted; {0, ahead} waiting; {-1} full;
# {-2} gone (evicted); leave: {n} slots given back; renew: {n} renewed; lease: {n} leased (all or
# none); give: {n} given back.
SCRIPT = """
local op, cap, bound, lease, chan = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expiry = string.format('%d', now + lease)
local wexpiry = string.format('%d', now + tonumber(ARGV[6]))
local reserve, rwindow = tonumber(ARGV[7]), tonumber(ARGV[8])
local block = tonumber(ARGV[9])
local run, alive, blk, who = KEYS[1], KEYS[2], KEYS[#KEYS - 1], KEYS[#KEYS]
local n = (#KEYS - 4) / 4
local window = math.max(1, math.min(cap, 64))
local function wait(r) return KEYS[3 + r] end
local function tags(r) return KEYS[3 + n + r] end
local function starts(r) return KEYS[3 + 2 * n + r] end
local function act(r) return KEYS[3 + 3 * n + r] end

-- a team's waiters in class r, counted (``q:<team>``) for the reserve
local function queued(r, team, d)
  if redis.call('HINCRBY', tags(r), 'q:' .. team, d) <= 0 then redis.call('HDEL', tags(r), 'q:' .. team) end
end

-- the class's virtual time: the lowest start of the last ``window`` served (0 before any)
local function virtual(r)
  local v = nil
  for _, s in ipairs(redis.call('LRANGE', starts(r), 0, -1)) do
    local x = tonumber(s)
    if v == nil or x < v then v = x end
  end
  return v or 0
end

local function drop_waiter(id)
  local team = redis.call('HGET', who, id)
  for r = 0, n - 1 do
    if redis.call('ZREM', wait(r), id) == 1 and team then queued(r, team, -1) end
  end
  redis.call('ZREM', alive, id)
  redis.call('HDEL', who, id, '#' .. id)
end

-- of the waiters of class r whose tag is that of its first (or last) in line: the earliest arrival
-- (or the latest); ties are as few as the teams that started at one virtual time
local function pick(r, last)
  local edge = redis.call('ZRANGE', wait(r), last and -1 or 0, last and -1 or 0, 'WITHSCORES')
  if #edge == 0 then return nil, nil end
  local best, bseq = nil, nil
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', wait(r), edge[2], edge[2])) do
    local seq = tonumber(redis.call('HGET', who, '#' .. id) or '0')
    if best == nil or (last and seq > bseq) or (not last and seq < bseq) then best, bseq = id, seq end
  end
  return best, edge[2]
end

local function waiting()
  local total = 0
  for r = 0, n - 1 do total = total + redis.call('ZCARD', wait(r)) end
  return total
end

-- the reserve (fairq.Reserve): whether team's request of class r is kept from the free slots
local function kept(r, team, free, total)
  if reserve == 0 or free > math.min(reserve, cap - 1) then return false end
  if total ~= tonumber(redis.call('HGET', tags(r), 'q:' .. team) or '0') then return false end
  local since = '(' .. (now - rwindow)
  for c = 0, r - 1 do
    if redis.call('ZCOUNT', act(c), since, '+inf') > 0 then return true end
  end
  local others = redis.call('ZCOUNT', act(r), since, '+inf')
  local own = redis.call('ZSCORE', act(r), team)
  if own and tonumber(own) > now - rwindow then others = others - 1 end
  return others > 0
end

-- near saturation while gateways hold blocks: they give their spare slots back and queue per request
local function tighten()
  if redis.call('ZCARD', blk) > 0 then redis.call('PUBLISH', chan, 'tight') end
end

local function tidy_and_promote()
  redis.call('ZREMRANGEBYSCORE', run, '-inf', now)
  redis.call('ZREMRANGEBYSCORE', blk, '-inf', now)
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', alive, '-inf', now)) do drop_waiter(id) end
  local promoted = {}
  while redis.call('ZCARD', run) < cap do
    local head = nil
    for r = 0, n - 1 do
      local id, start = pick(r, false)
      if id ~= nil then
        local team = redis.call('HGET', who, id) or ''
        if kept(r, team, cap - redis.call('ZCARD', run), waiting()) then break end
        head = id
        queued(r, team, -1)
        redis.call('ZREM', wait(r), id)
        redis.call('RPUSH', starts(r), start)
        redis.call('LTRIM', starts(r), -window, -1)
        break
      end
    end
    if head == nil then break end
    redis.call('ZREM', alive, head)
    redis.call('HDEL', who, head, '#' .. head)
    redis.call('ZADD', run, expiry, head)
    promoted[#promoted + 1] = head
  end
  if #promoted > 0 then redis.call('PUBLISH', chan, table.concat(promoted, ' ')) end
end

local function ahead(rank, tag)
  local count = 0
  for r = 0, rank - 1 do count = count + redis.call('ZCARD', wait(r)) end
  return count + redis.call('ZCOUNT', wait(rank), '-inf', tag)
end

if op == 'renew' then
  local renewed = 0
  for i = 10, #ARGV do
    if redis.call('ZSCORE', run, ARGV[i]) then
      renewed = renewed + 1
      redis.call('ZADD', run, expiry, ARGV[i])
      redis.call('ZADD', blk, 'XX', expiry, ARGV[i])
    end
  end
  -- said again while anyone waits: a gateway that missed the first message (its listener was down)
  if waiting() > 0 then tighten() end
  return {renewed}
end

-- a block of slots for a gateway to hand out with no call: only while nobody waits and as many again
-- stay free; else the pool nears saturation and every gateway queues per request
if op == 'lease' then
  tidy_and_promote()
  local k = #ARGV - 9
  if waiting() > 0 or cap - redis.call('ZCARD', run) < 2 * k then return {0} end
  for i = 10, #ARGV do
    redis.call('ZADD', run, expiry, ARGV[i])
    redis.call('ZADD', blk, expiry, ARGV[i])
  end
  return {k}
end

if op == 'give' then
  local given = 0
  for i = 10, #ARGV do
    given = given + redis.call('ZREM', run, ARGV[i])
    redis.call('ZREM', blk, ARGV[i])
  end
  tidy_and_promote()
  return {given}
end

local id, rank, team = ARGV[10], tonumber(ARGV[11]), ARGV[12]
if op == 'leave' then
  local held = redis.call('ZREM', run, id)
  redis.call('ZREM', blk, id)
  drop_waiter(id)
  tidy_and_promote()
  return {held}
end

if op == 'enter' and reserve > 0 then
  redis.call('ZADD', act(rank), now, team)
  redis.call('ZREMRANGEBYSCORE', act(rank), '-inf', now - rwindow)
end
tidy_and_promote()
if redis.call('ZSCORE', run, id) then return {1} end
local mine = redis.call('ZSCORE', wait(rank), id)
if mine then
  redis.call('ZADD', alive, wexpiry, id)
  return {0, ahead(rank, mine)}
end
if op == 'check' then return {-2} end
local total = waiting()
local free = cap - redis.call('ZCARD', run)
if total == 0 and free > 0 and not kept(rank, team, free, 0) then
  redis.call('ZADD', run, expiry, id)
  if free - 1 < block then tighten() end
  return {1}
end
local weight = tonumber(ARGV[13])
local v = virtual(rank)
-- never earlier than the virtual time less the credit a team below its share banks (twice the window)
local start = v - 2 * window
local last = redis.call('HGET', tags(rank), team)
if last and tonumber(last) > start then start = tonumber(last) end
-- every digit of the tags, as the Python twin sums them (a Lua number passed to Redis keeps 14)
local tag = string.format('%.17g', start)
local finish = string.format('%.17g', start + 1 / weight)
if total >= bound then
  -- the last in line of the lowest class below; else of its own class, if behind the newcomer
  local victim, vtag, vr = nil, nil, nil
  for r = n - 1, rank, -1 do
    local tail, ttag = pick(r, true)
    if tail ~= nil and (r > rank or tonumber(ttag) > tonumber(tag)) then
      victim, vtag, vr = tail, ttag, r
      break
    end
  end
  if victim == nil then return {-1} end
  -- not charged to its team: that team's last finish goes back to the victim's start
  local vteam = redis.call('HGET', who, victim)
  if vteam then
    local vw = tonumber(redis.call('HGET', tags(vr), 'w:' .. vteam) or '0')
    local vlast = tonumber(redis.call('HGET', tags(vr), vteam) or '-1')
    if vw > 0 and vlast == tonumber(vtag) + 1 / vw then
      redis.call('HSET', tags(vr), vteam, vtag)
    end
  end
  drop_waiter(victim)
  redis.call('PUBLISH', chan, 'evicted:' .. victim)
end
redis.call('HSET', tags(rank), team, finish, 'w:' .. team, ARGV[13])
queued(rank, team, 1)
redis.call('HSET', who, id, team, '#' .. id, redis.call('HINCRBY', who, '~n', 1))
redis.call('ZADD', wait(rank), tag, id)
redis.call('ZADD', alive, wexpiry, id)
tidy_and_promote()
if redis.call('ZSCORE', run, id) then return {1} end
tighten()
return {0, ahead(rank, tag)}
"""

GRANTED, WAITING, FULL, GONE = 1, 0, -1, -2
SHA = hashlib.sha1(SCRIPT.encode()).hexdigest().encode()  # as Redis names the script (EVALSHA)


def keys(model: str, classes: int) -> list[str]:
    base = f"gw:fq:{{{model}}}"
    waits = [f"{base}:wait:{r}" for r in range(classes)]
    tags = [f"{base}:tag:{r}" for r in range(classes)]
    starts = [f"{base}:vt:{r}" for r in range(classes)]
    seen = [f"{base}:act:{r}" for r in range(classes)]
    return [f"{base}:run", f"{base}:alive", *waits, *tags, *starts, *seen, f"{base}:blk", f"{base}:who"]


def channel(model: str) -> str:
    return f"gw:fq:{{{model}}}:free"


PATTERN = "gw:fq:*:free"  # every model's channel: models a reload adds are heard without subscribing again
