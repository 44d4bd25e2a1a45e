-- hset(key, first): HSET of ARGV[first..] as field/value pairs, in chunks
-- of HSET_CHUNK pairs (unpack has a stack limit of about 8000 values);
-- returns how many fields were new.
local HSET_CHUNK = 1000
local function hset(key, first)
  local added = 0
  local i = first
  while i <= #ARGV do
    local j = math.min(i + 2 * HSET_CHUNK - 1, #ARGV)
    added = added + redis.call('HSET', key, unpack(ARGV, i, j))
    i = j + 1
  end
  return added
end
