-- INIT. ARGV[1] prefix, [5] layout version, [6] dupefilter kind, [7] exact bucket bits, [8] bloom capacity,
-- [9] bloom error rate. Returns the stored kind and bits (a frontier keeps the filter it was made with).
local P = ARGV[1]
local K_CFG = P..':cfg'
local layout = redis.call('HGET', K_CFG, 'layout')
if layout and layout ~= ARGV[5] then
  return {'layout', layout}
end
if not layout then
  redis.call('HSET', K_CFG, 'layout', ARGV[5], 'kind', ARGV[6], 'bits', ARGV[7])
  if ARGV[6] == 'bloom' then
    local cap = tonumber(ARGV[8])
    local err = tonumber(ARGV[9])
    local m = math.ceil(-cap * math.log(err / 2) / (math.log(2) ^ 2))
    if m < 64 then m = 64 end
    local k = math.floor(m / cap * math.log(2) + 0.5)
    if k < 1 then k = 1 end
    redis.call('HSET', P..':bloom', 'n', 1, 'err', ARGV[9], 'm1', m, 'k1', k, 'cap1', cap, 'cnt1', 0)
  end
end
return {'ok', redis.call('HGET', K_CFG, 'kind'), redis.call('HGET', K_CFG, 'bits')}
