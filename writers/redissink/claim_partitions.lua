-- claim_partitions: take some partitions for one member of a group.
--
--   KEYS[1] epoch_key    mb:{job}:epoch
--   KEYS[2] epochs_key   mb:{job}:epochs
--   ARGV[1] min_epoch    the group generation
--   ARGV[2..] the partitions' "topic/partition" fields
--
-- Takes max(min_epoch, 1 + the job's epoch), raises the job's epoch to it
-- and stamps it on the partitions. Returns it.
local epoch_key, epochs_key = KEYS[1], KEYS[2]
local min_epoch = tonumber(ARGV[1])
local e = tonumber(redis.call('GET', epoch_key) or '0') + 1
if min_epoch > e then
  e = min_epoch
end
local s = string.format('%d', e)
redis.call('SET', epoch_key, s)
for i = 2, #ARGV do
  redis.call('HSET', epochs_key, ARGV[i], s)
end
return e
