-- claim: take the whole job.
--
--   KEYS[1] epoch_key    mb:{job}:epoch
--   KEYS[2] epochs_key   mb:{job}:epochs
--
-- The new job epoch is newer than every partition's (the job epoch is the
-- highest ever handed out), and with the partitions' own epochs gone it is
-- every partition's effective epoch. Returns it.
local epoch_key, epochs_key = KEYS[1], KEYS[2]
local e = redis.call('INCR', epoch_key)
redis.call('DEL', epochs_key)
return e
