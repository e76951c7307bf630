"""The Lua scripts that alone change an account's permits in Redis, atomically.

Every script starts with :data:`_PRELUDE`, which reads the clock with Redis ``TIME`` (one
clock for every worker, whatever their hosts say), applies the rate learned from 429s,
forgets expired permits and detects a Redis that lost its data. All times are integer
microseconds of Redis time (exact in a Lua double until the year 2255).

Keys (one account, one hash tag, so Redis Cluster keeps them on one slot):

- ``KEYS[1]`` permits, a sorted set: member = permit id, score = the latest moment that
  permit's request may reach the server. A held permit scores ``acquired + lease``
  (``+ ahead`` if it was fetched ahead for a job about to order); a released one
  ``released`` (``sent=True``) or is removed (``sent=False``). A permit is counted until
  ``score + window + margin`` - the in-process limiter's rule, shared.
- ``KEYS[2]`` state, a hash: ``limit``/``window`` learned from 429s (only ever stricter),
  ``paused_until`` after a 429, ``epoch``/``born``, which name this copy of the data, and
  ``next``/``next_wanted``/``next_until``: the process first in line for the permits that
  free next, how many it wants, and until when the line is kept for it.

Common arguments: ``ARGV[1]`` configured limit, ``ARGV[2]`` configured window (us),
``ARGV[3]`` margin (us, or -1 for ``margin_share`` of the window), ``ARGV[4]`` margin
share, ``ARGV[5]`` the epoch the caller knew ('' if none), ``ARGV[6]`` a fresh epoch to
use if the state is missing, ``ARGV[7]`` state TTL (ms).

Every script returns ``{result, wait_us, limit, window_us, margin_us, epoch, paused_us,
count, contended}``: ``paused_us`` how long everyone is still paused (0 if not), ``count``
how many permits of the account count now, ``contended`` 1 if none is left or a process
waits in line (so releases matter to others now), else 0.
"""

from __future__ import annotations

__all__ = ["PAUSE", "SYNC"]

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
local function reply(result, wait, contended)
  return {result, wait, limit, window, hold - window, epoch,
          math.max(0, paused_until - now), redis.call('ZCARD', permits), contended or 0}
end
"""

#: Everything one process has for the account, in one round trip: ``ARGV[8]`` lease (us),
#: ``ARGV[9]`` ahead (us), ``ARGV[10]`` the number R of releases, ``ARGV[11]`` how many of
#: the wanted ids are for waiters (D), ``ARGV[12]`` the caller's name, ``ARGV[13]`` how long
#: (us) the line is kept for a process after the moment it was told to come back, then
#:
#: 1. R triples (``'1'`` sent / ``'0'`` not, age in us, id): a sent permit counts from the
#:    moment it was released - ``now - age``, its true time even if the release was held
#:    back to share this call - until that + window + margin (even if its lease had run
#:    out and the set had dropped it); an unsent one is removed.
#: 2. the ids of the permits wanted: as many as are free are granted (none while paused).
#:    The first D are for waiters about to send (they count for ``lease``), the others are
#:    fetched ahead for jobs about to order (``lease + ahead``: they may wait up to
#:    ``ahead`` in the process before their request starts).
#:
#: ``result``: the number granted; ``wait``: if permits were wanted and none is left, how
#: long until the next frees (while paused, until the pause ends).
#:
#: First in line: a process refused some of what it wants becomes ``next`` (unless another
#: is and its time has not run out) and is told when the next permit frees. Others are
#: kept from the permits it wants until it comes back for them (or its time runs out) and
#: are told to come back once those have freed too - so the processes of a busy account
#: do not all wake for every permit that frees, and are served in the order they waited.
SYNC = (
    _PRELUDE
    + """
local lease, ahead = tonumber(ARGV[8]), tonumber(ARGV[9])
local releases, direct = tonumber(ARGV[10]), tonumber(ARGV[11])
local me, grace = ARGV[12], tonumber(ARGV[13])
local first = 14 + 3 * releases
local written = false
for i = 14, first - 1, 3 do
  local at = now - tonumber(ARGV[i + 1])
  if ARGV[i] == '1' and at > now - hold then
    redis.call('ZADD', permits, at, ARGV[i + 2])
    written = true
  else
    redis.call('ZREM', permits, ARGV[i + 2])
  end
end
local wanted = #ARGV - first + 1
local granted, wait, contended = 0, 0, 1
if now < paused_until then
  if wanted > 0 then wait = paused_until - now end
else
  local line = redis.call('HMGET', state, 'next', 'next_wanted', 'next_until')
  local kept = 0  -- permits kept for the process first in line
  if line[1] and line[1] ~= me and now < tonumber(line[3]) then kept = tonumber(line[2]) end
  local count = redis.call('ZCARD', permits)
  if kept == 0 and count < limit and not (line[1] and now < tonumber(line[3])) then
    contended = 0
  end
  while granted < wanted and count + kept < limit do
    local score = now + lease
    if granted >= direct then score = score + ahead end
    redis.call('ZADD', permits, score, ARGV[first + granted])
    granted = granted + 1
    count = count + 1
    written = true
  end
  if count + kept >= limit then contended = 1 end
  if wanted > 0 and count + kept >= limit then
    -- None left: the permit whose expiry brings the count below the limit, less what
    -- is kept for the first in line (scores ascend); beyond the set, one hold.
    local k = count - limit + kept
    wait = hold
    if k < count then
      local entry = redis.call('ZRANGE', permits, k, k, 'WITHSCORES')
      wait = tonumber(entry[2]) + hold - now
    end
    if kept > 0 then
      -- Behind the first in line: not before its time runs out either, so that a first
      -- in line that died is passed over at once.
      wait = math.max(wait, tonumber(line[3]) - now)
    elseif granted < wanted then
      redis.call('HSET', state, 'next', me, 'next_wanted', wanted - granted,
                 'next_until', now + wait + grace)
    end
  end
  if line[1] == me and wanted > 0 and granted == wanted then
    redis.call('HDEL', state, 'next', 'next_wanted', 'next_until')  -- served
  end
end
if written then
  -- No entry written now lives longer than a fetched-ahead one: lease + ahead + hold.
  local ttl = math.floor((lease + ahead + hold) / 1000) + 1000
  if redis.call('PTTL', permits) < ttl then redis.call('PEXPIRE', permits, ttl) end
end
return reply(granted, wait, contended)
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
