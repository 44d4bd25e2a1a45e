-- Exact integer arithmetic on decimal strings for the fold. Lua numbers
-- are doubles, exact only to 2^53: none of this computes in them.
--
-- LIMIT is a bound well below 2^63 that a double's rounding of a sum
-- can't carry across.
local LIMIT = 9.2e18
-- isint: a canonical decimal integer of any length, as Redis and
-- bigadd write them (no sign on 0, no leading zeros).
local function isint(s)
  return s == '0' or string.match(s, '^%-?[1-9]%d*$') ~= nil
end
-- addmag, submag and cmpmag take magnitudes (digits, no sign).
local function addmag(a, b)
  local r, carry, i, j = {}, 0, #a, #b
  while i > 0 or j > 0 or carry > 0 do
    local d = carry
    if i > 0 then d = d + string.byte(a, i) - 48; i = i - 1 end
    if j > 0 then d = d + string.byte(b, j) - 48; j = j - 1 end
    carry = 0
    if d >= 10 then d = d - 10; carry = 1 end
    r[#r + 1] = string.char(48 + d)
  end
  return string.reverse(table.concat(r))
end
local function submag(a, b) -- a >= b
  local r, borrow, i, j = {}, 0, #a, #b
  while i > 0 do
    local d = string.byte(a, i) - 48 - borrow
    if j > 0 then d = d - (string.byte(b, j) - 48); j = j - 1 end
    borrow = 0
    if d < 0 then d = d + 10; borrow = 1 end
    r[#r + 1] = string.char(48 + d)
    i = i - 1
  end
  local s = (string.gsub(string.reverse(table.concat(r)), '^0+', ''))
  if s == '' then return '0' end
  return s
end
local function cmpmag(a, b)
  if #a ~= #b then return #a < #b and -1 or 1 end
  if a == b then return 0 end
  return a < b and -1 or 1
end
-- bigadd: the exact sum of two canonical integers.
local function bigadd(a, b)
  local na, nb = string.sub(a, 1, 1) == '-', string.sub(b, 1, 1) == '-'
  local ma, mb = a, b
  if na then ma = string.sub(a, 2) end
  if nb then mb = string.sub(b, 2) end
  local neg, m
  if na == nb then
    neg, m = na, addmag(ma, mb)
  else
    local c = cmpmag(ma, mb)
    if c == 0 then return '0' end
    if c > 0 then neg, m = na, submag(ma, mb) else neg, m = nb, submag(mb, ma) end
  end
  if neg and m ~= '0' then return '-' .. m end
  return m
end
-- isdec: a decimal as per-column MergeMin/MergeMax store it: an optional
-- sign, digits, and optionally a point and digits ("-12.50", "+7").
local function isdec(s)
  return string.match(s, '^[-+]?%d+$') ~= nil or string.match(s, '^[-+]?%d+%.%d+$') ~= nil
end
-- decparts: decimal s (isdec) as its sign, integer digits without leading
-- zeros and fraction digits without trailing zeros; zero has no sign.
local function decparts(s)
  local neg = string.sub(s, 1, 1) == '-'
  local body = string.gsub(s, '^[-+]', '')
  local int, frac = string.match(body, '^(%d+)%.?(%d*)$')
  int = string.gsub(int, '^0+', '')
  frac = string.gsub(frac, '0+$', '')
  if int == '' and frac == '' then
    neg = false
  end
  return neg, int, frac
end
-- deccmp compares decimals a and b (isdec) exactly, digit by digit: -1, 0
-- or +1 ("12.5" equals "12.50", "-0" equals "0").
local function deccmp(a, b)
  local na, ia, fa = decparts(a)
  local nb, ib, fb = decparts(b)
  if na ~= nb then
    return na and -1 or 1
  end
  local c = cmpmag(ia, ib)
  if c == 0 then
    -- Fractions padded to one length compare digit for digit.
    local w = math.max(#fa, #fb)
    c = cmpmag(fa .. string.rep('0', w - #fa), fb .. string.rep('0', w - #fb))
  end
  if na then
    return -c
  end
  return c
end
