-- reset: move partitions of a stopped job to new offsets.
--
--   KEYS[1] epoch_key       mb:{job}:epoch
--   KEYS[2] epochs_key      mb:{job}:epochs
--   KEYS[3] offsets_key     mb:{job}:offsets
--   KEYS[4] plan_parts_key  mb:{job}:plan:parts
--   KEYS[5..]               the contribution keys to delete
--   ARGV[3i+1], ARGV[3i+2], ARGV[3i+3]  partition i's field, new offset and
--                           its plan:parts entry as read before ("" if
--                           none) (i >= 0)
--
-- Returns the new epoch, then each partition's old offset ("" if none).
local epoch_key, epochs_key, offsets_key, plan_parts_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local n = #ARGV / 3
for i = 0, n - 1 do
  local field, want = ARGV[3 * i + 1], ARGV[3 * i + 3]
  if (redis.call('HGET', plan_parts_key, field) or '') ~= want then
    return redis.error_reply('MBCONFLICT the logged range of ' .. field .. ' changed during the reset: is the job running?')
  end
end
local s = string.format('%d', tonumber(redis.call('GET', epoch_key) or '0') + 1)
redis.call('SET', epoch_key, s)
local out = {s}
for i = 0, n - 1 do
  local field, to = ARGV[3 * i + 1], ARGV[3 * i + 2]
  out[#out + 1] = redis.call('HGET', offsets_key, field) or ''
  redis.call('HSET', offsets_key, field, to)
  redis.call('HSET', epochs_key, field, s)
  redis.call('HDEL', plan_parts_key, field)
end
for k = 5, #KEYS do
  redis.call('DEL', KEYS[k])
end
return out
