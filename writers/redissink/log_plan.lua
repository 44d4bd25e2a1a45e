-- log_plan: log batch batch_id's ranges (after fence.lua). It checks
-- everything before it writes anything.
--
--   KEYS[1] epoch_key       mb:{job}:epoch
--   KEYS[2] epochs_key      mb:{job}:epochs
--   KEYS[3] offsets_key     mb:{job}:offsets
--   KEYS[4] plan_parts_key  mb:{job}:plan:parts
--   KEYS[5] plan_key        mb:{job}:plan:{batch_id}
--   KEYS[6] last_plan_key   mb:{job}:plan:last
--   KEYS[7] pruned_key      mb:{job}:plan:{batch_id - plans kept}
--   ARGV[1] epoch
--   ARGV[2] batch_id
--   ARGV[3] plan            the plan's JSON
--   ARGV[3i+1], ARGV[3i+2], ARGV[3i+3]  range i's field, from, to (i >= 1)
local epoch_key, epochs_key, offsets_key, plan_parts_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local plan_key, last_plan_key, pruned_key = KEYS[5], KEYS[6], KEYS[7]
local epoch, batch_id, plan = ARGV[1], ARGV[2], ARGV[3]
local n = (#ARGV - 3) / 3
local function range(i)
  return ARGV[3 * i + 1], ARGV[3 * i + 2], ARGV[3 * i + 3]
end
for i = 1, n do
  local field = range(i)
  local err = fence(epoch_key, epochs_key, field, epoch, 'plan')
  if err then
    return err
  end
end
local cur = redis.call('GET', plan_key)
if cur and cur ~= plan then
  return redis.error_reply('MBCONFLICT batch ' .. batch_id .. ' was planned with other ranges: ' .. cur)
end
for i = 1, n do
  local field, from, to = range(i)
  local logged = redis.call('HGET', plan_parts_key, field)
  if logged then
    local lid, lfrom, lto = string.match(logged, '^(%d+) (%d+) (%d+)$')
    if not lid then
      return redis.error_reply('MBCORRUPT ' .. plan_parts_key .. ' field ' .. field .. ' = ' .. logged)
    end
    if (from ~= lfrom or to ~= lto) and redis.call('HGET', offsets_key, field) == lfrom then
      return redis.error_reply('MBCONFLICT ' .. field .. ' ' .. from .. '-' .. to .. ': the range ' .. lfrom .. '-' .. lto .. ' logged by batch ' .. lid .. ' is not folded yet')
    end
  end
end
redis.call('SET', plan_key, plan)
for i = 1, n do
  local field, from, to = range(i)
  redis.call('HSET', plan_parts_key, field, batch_id .. ' ' .. from .. ' ' .. to)
end
local last = redis.call('GET', last_plan_key)
if not last or tonumber(last) < tonumber(batch_id) then
  redis.call('SET', last_plan_key, batch_id)
end
redis.call('DEL', pruned_key)
return 1
