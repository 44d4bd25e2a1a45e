-- write_contribution: replace a range's contribution (after fence.lua,
-- hset.lua, check_contribution.lua).
--
--   KEYS[1] epoch_key     mb:{job}:epoch
--   KEYS[2] epochs_key    mb:{job}:epochs
--   KEYS[3] offsets_key   mb:{job}:offsets
--   KEYS[4] contrib_key   mb:{job}:contrib:{topic}:{partition}:{from}-{to}
--   KEYS[5] staged_key    the contribution's staged dead letters (…:dead)
--   ARGV[1] epoch, ARGV[2] field, ARGV[3] from, ARGV[4] to (see
--           check_contribution)
--   ARGV[5..] the contribution's field/value pairs
--
-- Returns 1 if written, 0 if the range was folded already. Without an "n"
-- field (no dead letters staged for this contribution) it drops whatever
-- an earlier attempt staged.
local contrib_key, staged_key = KEYS[4], KEYS[5]
local err, folded = check_contribution()
if err then
  return err
end
if folded then
  return 0
end
redis.call('DEL', contrib_key)
hset(contrib_key, 5)
if redis.call('HEXISTS', contrib_key, 'n') == 0 then
  redis.call('DEL', staged_key)
end
return 1
