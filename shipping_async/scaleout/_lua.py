"""The Lua scripts that alone change an account's permits in Redis, atomically.

Every script starts with :data:`_PRELUDE`, which reads the clock with Redis ``TIME`` (one
clock for every worker, whatever their hosts say), applies the rate learned from 429s,
forgets expired permits and detects a Redis that lost its data. All times are integer
microseconds of Redis time (exact in a Lua double until the year 2255).

Keys (one account, one hash tag, so Redis Cluster keeps them on one slot):

- ``KEYS[1]`` permits, a sorted set: member = permit id, score = the latest moment that
  permit's request may reach the server. A held permit scores ``acquired + lease``
  (``+ reserve lease`` while it waits unused in a process's reserve); a released one
  ``released`` (``sent=True``) or is removed (``sent=False``). A permit is counted until
  ``score + window + margin`` - the in-process limiter's rule, shared.
- ``KEYS[2]`` state, a hash: ``limit``/``window`` learned from 429s (only ever stricter),
  ``paused_until`` after a 429, and ``epoch``/``born``, which name this copy of the data.

Common arguments: ``ARGV[1]`` configured limit, ``ARGV[2]`` configured window (us),
``ARGV[3]`` margin (us, or -1 for ``margin_share`` of the window), ``ARGV[4]`` margin
share, ``ARGV[5]`` the epoch the caller knew ('' if none), ``ARGV[6]`` a fresh epoch to
use if the state is missing, ``ARGV[7]`` state TTL (ms).

Every script returns ``{result, wait_us, limit, window_us, margin_us, epoch}``.
"""

from __future__ import annotations

__all__ = ["ACQUIRE", "PAUSE", "RELEASE", "TAKE"]

_PRELUDE = """
local permits, state = KEYS[1], KEYS[2]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local limit, window = tonumber(ARGV[1]), tonumber(ARGV[2])
local margin_arg, share = tonumber(ARGV[3]), tonumber(ARGV[4])
local s = redis.call('HMGET', state, 'limit', 'window', 'paused_until', 'epoch', 'born')
if s[1] then limit = math.min(limit, tonumber(s[1])) end
if s[2] then window = math.max(window, tonumber(s[2])) end
local paused_until = tonumber(s[3] or '0')
local function hold_of(w)
  if margin_arg >= 0 then return w + margin_arg end
  return w + math.floor(w * share)
end
local hold = hold_of(window)
local epoch, born = s[4], tonumber(s[5] or '0')
if not epoch then
  epoch, born = ARGV[6], now
  redis.call('HSET', state, 'epoch', epoch, 'born', born)
end
if ARGV[5] ~= '' and ARGV[5] ~= epoch then
  -- The caller saw permits that this copy of the data does not hold (Redis restarted
  -- empty, or failed over): orders sent before it was born may still be in the
  -- server's window, so nobody sends until one full hold after its birth.
  if born + hold > paused_until then
    paused_until = born + hold
    redis.call('HSET', state, 'paused_until', paused_until)
  end
end
redis.call('PEXPIRE', state, tonumber(ARGV[7]))
redis.call('ZREMRANGEBYSCORE', permits, '-inf', now - hold)
local function reply(result, wait)
  return {result, wait, limit, window, hold - window, epoch}
end
"""

#: ``ARGV[8]`` lease (us), ``ARGV[9]`` how many of the ids are for waiters, ``ARGV[10]``
#: the short lease (us) of the others, fetched ahead into a reserve (their ids start with
#: ``r:``; see ``TAKE``), ``ARGV[11]`` how soon (us) to look again while permits sit in a
#: reserve; ``ARGV[12..]`` ids for the permits wanted, waiters first. Grants as many as
#: are free (none while paused); returns the number granted and, if some were not, how
#: long until the next permit frees - or, while permits sit in a reserve (a given-back
#: one frees at once, unannounced), ``ARGV[11]`` if that is sooner.
ACQUIRE = (
    _PRELUDE
    + """
local lease, direct, reserve_lease = tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10])
local recheck = tonumber(ARGV[11])
local wanted = #ARGV - 11
if now < paused_until then return reply(0, paused_until - now) end
local count = redis.call('ZCARD', permits)
local granted = 0
while granted < wanted and count < limit do
  granted = granted + 1
  count = count + 1
  local hold_for = lease
  if granted > direct then hold_for = reserve_lease end
  redis.call('ZADD', permits, now + hold_for, ARGV[11 + granted])
end
local wait = 0
if granted < wanted then
  -- The permit whose expiry brings the count below the limit (scores ascend).
  local all = redis.call('ZRANGE', permits, 0, -1, 'WITHSCORES')
  wait = tonumber(all[2 * (count - limit) + 2]) + hold - now
  for i = 1, #all, 2 do
    if string.sub(all[i], 1, 2) == 'r:' then
      -- Fetched ahead by a process that may give it back at any moment: look again
      -- soon rather than when its count would run out.
      wait = math.min(wait, recheck)
      break
    end
  end
end
redis.call('PEXPIRE', permits, math.floor((lease + hold) / 1000) + 1000)
return reply(granted, wait)
"""
)

#: ``ARGV[8]`` lease (us), ``ARGV[9]`` id (``r:ID``) of a permit from the reserve, about to
#: be used: it becomes ``ID`` and counts for a full lease. Returns 0 if it had expired (it
#: no longer counts: the caller must acquire anew). A worker that dies with permits in
#: reserve thus blocks them only for the short reserve lease, not for a request's.
TAKE = (
    _PRELUDE
    + """
if not redis.call('ZSCORE', permits, ARGV[9]) then return reply(0, 0) end
redis.call('ZREM', permits, ARGV[9])
if now < paused_until then
  -- A 429 paused everyone after this permit was fetched: it must not be used now.
  return reply(0, paused_until - now)
end
redis.call('ZADD', permits, now + tonumber(ARGV[8]), string.sub(ARGV[9], 3))
return reply(1, 0)
"""
)

#: ``ARGV[8]`` '1' if the request may have reached the server, else '0'; ``ARGV[9]`` id.
RELEASE = (
    _PRELUDE
    + """
if ARGV[8] == '1' then
  -- Counted from now, even if its lease had run out and the set had dropped it.
  redis.call('ZADD', permits, now, ARGV[9])
  local ttl = math.floor(hold / 1000) + 1000
  if redis.call('PTTL', permits) < ttl then redis.call('PEXPIRE', permits, ttl) end
  return reply(1, 0)
end
return reply(redis.call('ZREM', permits, ARGV[9]), 0)
"""
)

#: ``ARGV[8]`` pause (us), ``ARGV[9]`` limit from the 429 text, ``ARGV[10]`` its window
#: (us). A stricter rate is stored for every worker; then nobody acquires until
#: ``now + pause + margin`` (the margin of the adopted window).
PAUSE = (
    _PRELUDE
    + """
local new_limit, new_window = tonumber(ARGV[9]), tonumber(ARGV[10])
if new_limit < limit or new_window > window then
  limit, window = math.min(limit, new_limit), math.max(window, new_window)
  redis.call('HSET', state, 'limit', limit, 'window', window)
  hold = hold_of(window)
end
local until_ = now + tonumber(ARGV[8]) + hold - window
if until_ > paused_until then
  paused_until = until_
  redis.call('HSET', state, 'paused_until', paused_until)
end
return reply(1, math.max(0, paused_until - now))
"""
)
