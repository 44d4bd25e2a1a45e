-- fence(epoch_key, epochs_key, field, epoch, what): an error reply if the
-- effective epoch of partition field (its own in epochs_key, else the
-- job's in epoch_key) is newer than the caller's epoch, else nil. Only the
-- partitions a script touches are checked: a newer epoch on another
-- member's partitions is none of this caller's business. what names the
-- call in the error ('plan', 'write', 'fold').
local function fence(epoch_key, epochs_key, field, epoch, what)
  local e = redis.call('HGET', epochs_key, field) or redis.call('GET', epoch_key) or '0'
  if tonumber(e) > tonumber(epoch) then
    return redis.error_reply('MBFENCED ' .. field .. ' was claimed with epoch ' .. e .. ', the ' .. what .. ' has ' .. epoch)
  end
  return nil
end
