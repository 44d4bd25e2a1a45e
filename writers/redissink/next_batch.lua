-- next_batch: hand out the job's next batch id.
--
--   KEYS[1] batch_key      mb:{job}:batch
--   KEYS[2] last_plan_key  mb:{job}:plan:last
--
-- The id is above the counter and above every id logged so far.
local batch_key, last_plan_key = KEYS[1], KEYS[2]
local n = tonumber(redis.call('GET', batch_key) or '0')
local last = tonumber(redis.call('GET', last_plan_key) or '0')
if last > n then
  n = last
end
n = n + 1
redis.call('SET', batch_key, string.format('%d', n))
return n
