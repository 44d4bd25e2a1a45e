-- check_contribution checks a contribution write before it writes
-- anything: fenced, and the range still at its start. It returns an error
-- reply, or nil and whether the range was folded already (then there is
-- nothing to write: a late write would only leave keys no fold ever
-- takes). It reads the positions every contribution script shares:
--
--   KEYS[1] epoch_key    mb:{job}:epoch
--   KEYS[2] epochs_key   mb:{job}:epochs
--   KEYS[3] offsets_key  mb:{job}:offsets
--   ARGV[1] epoch        the writer's epoch
--   ARGV[2] field        the range's "topic/partition"
--   ARGV[3] from         the range's start
--   ARGV[4] to           the range's end
local function check_contribution()
  local epoch_key, epochs_key, offsets_key = KEYS[1], KEYS[2], KEYS[3]
  local epoch, field, from, to = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
  local err = fence(epoch_key, epochs_key, field, epoch, 'write')
  if err then
    return err, false
  end
  local off = redis.call('HGET', offsets_key, field)
  if not off then
    return redis.error_reply('MBNOROW no offset for ' .. field), false
  end
  if off == to then
    return nil, true
  end
  if off ~= from then
    return redis.error_reply('MBCONFLICT ' .. field .. ' is at ' .. off .. ', the range is ' .. from .. '-' .. to), false
  end
  return nil, false
end
