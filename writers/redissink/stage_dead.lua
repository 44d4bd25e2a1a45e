-- stage_dead: stage dead letters of a range's contribution ahead of it
-- (after fence.lua, hset.lua, check_contribution.lua).
--
--   KEYS[1] epoch_key     mb:{job}:epoch
--   KEYS[2] epochs_key    mb:{job}:epochs
--   KEYS[3] offsets_key   mb:{job}:offsets
--   KEYS[4] contrib_key   mb:{job}:contrib:{topic}:{partition}:{from}-{to}
--   KEYS[5] staged_key    the contribution's staged dead letters (…:dead)
--   ARGV[1] epoch, ARGV[2] field, ARGV[3] from, ARGV[4] to (see
--           check_contribution)
--   ARGV[5] fresh         "1" to start afresh (drop the contribution and
--                         what an earlier attempt staged), else "0"
--   ARGV[6..] offset/dead letter JSON pairs
--
-- Returns how many offsets were new, or -1 if the range was folded
-- already.
local contrib_key, staged_key = KEYS[4], KEYS[5]
local fresh = ARGV[5]
local err, folded = check_contribution()
if err then
  return err
end
if folded then
  return -1
end
if fresh == '1' then
  redis.call('DEL', contrib_key, staged_key)
end
return hset(staged_key, 6)
