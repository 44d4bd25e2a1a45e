-- fold: fold batch batch_id's contributions (after fence.lua, exact.lua).
--
--   KEYS[1] epoch_key       mb:{job}:epoch
--   KEYS[2] epochs_key      mb:{job}:epochs
--   KEYS[3] offsets_key     mb:{job}:offsets
--   KEYS[4] events_key      mb:{job}:totals:events
--   KEYS[5] amount_key      mb:{job}:totals:amount
--   KEYS[6] plan_parts_key  mb:{job}:plan:parts
--   KEYS[3i+4], KEYS[3i+5], KEYS[3i+6]  range i's contribution, its staged
--                           dead letters and its partition's dead letters
--                           (i = 1..n, see range_keys)
--   KEYS[3n+7..]            the rows hashes the contributions may add to
--                           (FoldRows), mb:{job}:rows:{table}:{column}
--   ARGV[1] epoch
--   ARGV[2] batch_id
--   ARGV[3i], ARGV[3i+1], ARGV[3i+2]  range i's field, from, to
--
-- It runs in two passes so that a failure changes nothing (Redis does not
-- undo a script's writes when it fails half-way): the first pass reads and
-- checks everything a write could trip over (epochs, plan, offsets, key
-- types, stored values) and the second only writes.
--
-- Sums are exact integers of any size, stored as their decimal text (which
-- is what Redis stores for HINCRBY too): a total never wraps and never
-- stops the fold. The first pass follows each summed field with a Lua
-- double (exact only to 2^53) just to tell whether its stored value, every
-- increment and every intermediate sum stay within LIMIT: then the second
-- pass adds with HINCRBY, which does the exact int64 arithmetic. A field
-- for which that is not certain ("big") is summed exactly in decimal
-- strings (bigadd) after the first pass, before anything is written, and
-- its sum is set with HSET at the end. Lua never does the arithmetic in
-- doubles.
--
-- A user-defined job's fields (prefix, table:column NUL row-key) go to
-- the rows hash KEYS names for table:column; one the caller did not pass
-- is refused (MBCONFLICT), not written to an undeclared key. By prefix:
-- "a:" adds (as the totals), "s:" sets the text, "u:" deletes the field
-- (a replaced NULL), "n:" and "x:" keep the least and the greatest of the
-- stored and the new decimal, compared exactly as decimal text (deccmp,
-- never as doubles); a field without a stored value takes the new one.
-- The first pass checks that the new value and the stored one are
-- decimals (MBCORRUPT if not), so the second only compares and writes.
-- "l:" and "g:" keep the least and the greatest text, compared byte by
-- byte (bytecmp: Lua's < on strings follows the server's locale).
--
-- Returns how many ranges it folded.
local epoch_key, epochs_key, offsets_key = KEYS[1], KEYS[2], KEYS[3]
local events_key, amount_key, plan_parts_key = KEYS[4], KEYS[5], KEYS[6]
local epoch, batch_id = ARGV[1], ARGV[2]
local n = (#ARGV - 2) / 3
local function range_keys(i)
  return KEYS[4 + 3 * i], KEYS[5 + 3 * i], KEYS[6 + 3 * i]
end
local function range_args(i)
  return ARGV[3 * i], ARGV[3 * i + 1], ARGV[3 * i + 2]
end

for i = 1, n do
  local field = range_args(i)
  local err = fence(epoch_key, epochs_key, field, epoch, 'fold')
  if err then
    return err
  end
end
local function ishash(k)
  local t = redis.call('TYPE', k)['ok']
  return t == 'hash' or t == 'none'
end
for _, k in ipairs({offsets_key, events_key, amount_key}) do
  if not ishash(k) then
    return redis.error_reply('MBCORRUPT ' .. k .. ' is not a hash')
  end
end
-- rowkeys: "table:column" -> its rows hash.
local rowkeys = {}
for k = 7 + 3 * n, #KEYS do
  if not ishash(KEYS[k]) then
    return redis.error_reply('MBCORRUPT ' .. KEYS[k] .. ' is not a hash')
  end
  local sfx = string.match(KEYS[k], '}:rows:(.+)$')
  if not sfx then
    return redis.error_reply('MBCORRUPT ' .. KEYS[k] .. ' is not a rows key')
  end
  rowkeys[sfx] = KEYS[k]
end
-- rowtarget parses a rows field of contribution ck: its hash and the field
-- in it.
local function rowtarget(ck, f)
  local z = string.find(f, '\0', 3, true)
  if not z then
    return nil, nil, redis.error_reply('MBCORRUPT ' .. ck .. ' has a bad field ' .. f)
  end
  local sfx = string.sub(f, 3, z - 1)
  local hk = rowkeys[sfx]
  if not hk then
    return nil, nil, redis.error_reply('MBCONFLICT ' .. ck .. ' has rows for ' .. sfx .. ', which the fold was not given (fold a user-defined job with FoldRows and its Upsert)')
  end
  return hk, string.sub(f, z + 1), nil
end

-- bytecmp orders two strings by their bytes: -1, 0 or 1.
local function bytecmp(a, b)
  if a == b then
    return 0
  end
  local n = math.min(#a, #b)
  -- Skip the common prefix in chunks, then find the first differing byte.
  local i = 1
  while i + 64 <= n and string.sub(a, i, i + 63) == string.sub(b, i, i + 63) do
    i = i + 64
  end
  for j = i, n do
    local x, y = string.byte(a, j), string.byte(b, j)
    if x ~= y then
      return x < y and -1 or 1
    end
  end
  return #a < #b and -1 or 1
end

-- run[hash][field]: the field's sum so far as a double, only to bound
-- it. big[hash][field]: true for a field whose sum may leave int64 (its
-- stored value, an increment or a running sum past LIMIT); after the first
-- pass, its exact sum in decimal.
local run, big = {}, {}
local nbig = 0
-- account follows increment v of field key of hash hk (from field f of
-- contribution ck) in the first pass.
local function account(hk, key, v, ck, f)
  if not isint(v) then
    return redis.error_reply('MBCORRUPT ' .. ck .. ' field ' .. f .. ' = ' .. v)
  end
  local r = run[hk]
  if r == nil then
    r = {}
    run[hk] = r
    big[hk] = {}
  end
  local b = big[hk]
  local cur = r[key]
  if cur == nil then
    local s = redis.call('HGET', hk, key) or '0'
    if not isint(s) then
      return redis.error_reply('MBCORRUPT ' .. hk .. ' field ' .. key .. ' is not an integer')
    end
    cur = tonumber(s)
    if #s > 20 or math.abs(cur) > LIMIT then
      b[key] = true
      nbig = nbig + 1
    end
  end
  local x = tonumber(v)
  cur = cur + x
  r[key] = cur
  if not b[key] and (#v > 20 or math.abs(x) > LIMIT or math.abs(cur) > LIMIT) then
    b[key] = true
    nbig = nbig + 1
  end
  return nil
end
-- addbig adds an increment to a big field's exact sum.
local function addbig(hk, key, v)
  local b = big[hk]
  if b and b[key] then
    b[key] = bigadd(b[key], v)
  end
end
-- add applies an increment: HINCRBY, or nothing for a big field, whose
-- exact sum is set at the end.
local function add(hk, key, v)
  if not big[hk][key] then
    redis.call('HINCRBY', hk, key, v)
  end
end

-- rules[hash][field]: how this fold merges into a rows field: 'a' (add),
-- 'r' (set or delete) or 'd' (least or greatest). The second pass checks
-- nothing, so one field merged two ways in one fold (contributions of
-- jobs with other rules for a column) is refused in the first: an add
-- after a fraction was kept, or a comparison after a text was set, would
-- fail half-way through the writes.
local rules = {}
local function rule(ck, hk, key, r)
  local t = rules[hk]
  if t == nil then
    t = {}
    rules[hk] = t
  end
  if t[key] and t[key] ~= r then
    return redis.error_reply('MBCONFLICT ' .. ck .. ' merges ' .. hk .. ' field ' .. key .. ' by another rule than a contribution before it')
  end
  t[key] = r
  return nil
end

-- check_fields accounts for every field of contribution ck (kv: its
-- HGETALL) and refuses one it does not know.
local function check_fields(ck, kv)
  for j = 1, #kv, 2 do
    local f, v = kv[j], kv[j + 1]
    local p = string.sub(f, 1, 2)
    if p == 't:' then
      local c = string.find(v, ',', 1, true)
      if not c then
        return redis.error_reply('MBCORRUPT ' .. ck .. ' field ' .. f .. ' = ' .. v)
      end
      local key = string.sub(f, 3)
      local err = account(events_key, key, string.sub(v, 1, c - 1), ck, f) or account(amount_key, key, string.sub(v, c + 1), ck, f)
      if err then
        return err
      end
    elseif p == 'a:' then
      local hk, key, err = rowtarget(ck, f)
      if err then
        return err
      end
      err = rule(ck, hk, key, 'a') or account(hk, key, v, ck, f)
      if err then
        return err
      end
    elseif (p == 'u:' or p == 'n:' or p == 'x:' or p == 'l:' or p == 'g:') and not string.find(f, '\0', 3, true) then
      -- Not a rows field (those have table:column NUL row key).
      return redis.error_reply('MBCORRUPT ' .. ck .. ' has an unknown field ' .. f)
    elseif p == 's:' or p == 'u:' then
      local hk, key, err = rowtarget(ck, f)
      if err then
        return err
      end
      err = rule(ck, hk, key, 'r')
      if err then
        return err
      end
    elseif p == 'n:' or p == 'x:' then
      local hk, key, err = rowtarget(ck, f)
      if err then
        return err
      end
      if not isdec(v) then
        return redis.error_reply('MBCORRUPT ' .. ck .. ' field ' .. f .. ' = ' .. v)
      end
      err = rule(ck, hk, key, 'd')
      if err then
        return err
      end
      local s = redis.call('HGET', hk, key)
      if s and not isdec(s) then
        return redis.error_reply('MBCORRUPT ' .. hk .. ' field ' .. key .. ' is not a decimal')
      end
    elseif p == 'l:' or p == 'g:' then
      local hk, key, err = rowtarget(ck, f)
      if err then
        return err
      end
      err = rule(ck, hk, key, 'b')
      if err then
        return err
      end
    elseif p ~= 'd:' and f ~= 'm' and f ~= 'n' then
      return redis.error_reply('MBCORRUPT ' .. ck .. ' has an unknown field ' .. f)
    end
  end
  return nil
end

-- check_range checks range i against the plan log and its offset, and a
-- range still to fold against its contribution. It returns an error, or
-- nil and the range's work for the second pass (nil if folded before).
local function check_range(i)
  local ck, sk, dk = range_keys(i)
  local field, from, to = range_args(i)
  local logged = redis.call('HGET', plan_parts_key, field)
  if not logged then
    return redis.error_reply('MBMISSING no logged plan for ' .. field)
  end
  if logged ~= batch_id .. ' ' .. from .. ' ' .. to then
    return redis.error_reply('MBCONFLICT ' .. field .. ' ' .. from .. '-' .. to .. ' is not the range batch ' .. batch_id .. ' logged for it (the log has "' .. logged .. '")')
  end
  local off = redis.call('HGET', offsets_key, field)
  if not off then
    return redis.error_reply('MBNOROW no offset for ' .. field)
  end
  if off == to then
    return nil, nil
  end
  if off ~= from then
    return redis.error_reply('MBCONFLICT ' .. field .. ' is at ' .. off .. ', the range is ' .. from .. '-' .. to)
  end
  if redis.call('EXISTS', ck) == 0 then
    return redis.error_reply('MBMISSING no contribution for ' .. field .. ' ' .. from .. '-' .. to)
  end
  if not ishash(ck) or not ishash(sk) or not ishash(dk) then
    return redis.error_reply('MBCORRUPT ' .. ck .. ', ' .. sk .. ' or ' .. dk .. ' is not a hash')
  end
  local staged = redis.call('HGET', ck, 'n') or '0'
  if redis.call('HLEN', sk) ~= tonumber(staged) then
    return redis.error_reply('MBCORRUPT ' .. sk .. ' holds ' .. redis.call('HLEN', sk) .. ' dead letters, the contribution says ' .. staged)
  end
  local kv = redis.call('HGETALL', ck)
  local err = check_fields(ck, kv)
  if err then
    return err
  end
  return nil, {ck, dk, field, to, kv, sk}
end

-- First pass: check everything.
local todo = {}
for i = 1, n do
  local err, t = check_range(i)
  if err then
    return err
  end
  if t then
    todo[#todo + 1] = t
  end
end
-- The exact sums of the big fields (rare: only then a second look at the
-- contributions), still before anything is written.
if nbig > 0 then
  for hk, b in pairs(big) do
    for key in pairs(b) do
      b[key] = redis.call('HGET', hk, key) or '0'
    end
  end
  for _, t in ipairs(todo) do
    local ck, kv = t[1], t[5]
    for j = 1, #kv, 2 do
      local f, v = kv[j], kv[j + 1]
      local p = string.sub(f, 1, 2)
      if p == 't:' then
        local c = string.find(v, ',', 1, true)
        local key = string.sub(f, 3)
        addbig(events_key, key, string.sub(v, 1, c - 1))
        addbig(amount_key, key, string.sub(v, c + 1))
      elseif p == 'a:' then
        local hk, key = rowtarget(ck, f)
        addbig(hk, key, v)
      end
    end
  end
end
-- Second pass: write.
for _, t in ipairs(todo) do
  local ck, dk, field, to, kv, sk = t[1], t[2], t[3], t[4], t[5], t[6]
  -- One staged dead letter at a time: they may be far larger than the
  -- memory a script should hold at once.
  for _, off in ipairs(redis.call('HKEYS', sk)) do
    redis.call('HSET', dk, off, redis.call('HGET', sk, off))
  end
  redis.call('DEL', sk)
  for j = 1, #kv, 2 do
    local f, v = kv[j], kv[j + 1]
    local p = string.sub(f, 1, 2)
    if p == 't:' then
      local c = string.find(v, ',', 1, true)
      local key = string.sub(f, 3)
      add(events_key, key, string.sub(v, 1, c - 1))
      add(amount_key, key, string.sub(v, c + 1))
    elseif p == 'd:' then
      redis.call('HSET', dk, string.sub(f, 3), v)
    elseif p == 'a:' then
      local hk, key = rowtarget(ck, f)
      add(hk, key, v)
    elseif p == 's:' then
      local hk, key = rowtarget(ck, f)
      redis.call('HSET', hk, key, v)
    elseif p == 'u:' then
      local hk, key = rowtarget(ck, f)
      redis.call('HDEL', hk, key)
    elseif p == 'n:' or p == 'x:' then
      local hk, key = rowtarget(ck, f)
      local s = redis.call('HGET', hk, key)
      local keep = p == 'n:' and -1 or 1
      if not s or deccmp(v, s) == keep then
        redis.call('HSET', hk, key, v)
      end
    elseif p == 'l:' or p == 'g:' then
      local hk, key = rowtarget(ck, f)
      local s = redis.call('HGET', hk, key)
      local keep = p == 'l:' and -1 or 1
      if not s or bytecmp(v, s) == keep then
        redis.call('HSET', hk, key, v)
      end
    end
  end
  redis.call('HSET', offsets_key, field, to)
  redis.call('DEL', ck)
end
for hk, b in pairs(big) do
  for key, x in pairs(b) do
    redis.call('HSET', hk, key, x)
  end
end
return #todo
