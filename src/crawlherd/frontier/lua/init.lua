-- INIT. ARGV[1] prefix, [5] layout version, [6] dupefilter kind, [7] exact bucket bits, [8] bloom capacity,
-- [9] bloom error rate. Returns the stored kind and bits (a frontier keeps the filter it was made with).
local P = ARGV[1]
local K_CFG = P..':cfg'
local layout = redis.call('HGET', K_CFG, 'layout')
if layout == '4' and (ARGV[5] == '5' or ARGV[5] == '6') then
  -- layout 4 kept each lease's record in l:<serial> (id -> "<token>\t<prio>\t<host>\t<member>"): the
  -- leases out are kept as layout 5 keeps them (see prelude.lua); the rest of the layout is the same
  local SHIFT, seen = 17179869184, {}
  for _, e in ipairs(redis.call('ZRANGE', P..':lexp', 0, -1)) do
    local ser = string.match(e, '^(%d+)')
    if ser and not seen[ser] then
      seen[ser] = true
      local key = P..':l:'..ser
      local all = redis.call('HGETALL', key)
      local live, lines = {}, {}
      for j = 1, #all, 2 do
        local tok, prio, host, member = string.match(all[j + 1], '^([^\t]*)\t(%-?%d+)\t([^\t]*)\t(.*)$')
        local id = tonumber(all[j])
        if tok and id then
          live[#live + 1], live[#live + 2] = all[j], host
          lines[#lines + 1] = all[j]..'\n'..string.format('%.17g', -tonumber(prio) * SHIFT + id)..'\n'..host..
            '\t'..member..'\n'
        end
      end
      redis.call('DEL', key)
      if #live > 0 then live[#live + 1], live[#live + 2] = '\t', string.rep('-', 256) end  -- the pin (prelude.lua)
      for i = 1, #live, 4000 do redis.call('HSET', key, unpack(live, i, math.min(i + 3999, #live))) end
      if #lines > 0 then redis.call('SET', P..':lb:'..ser, table.concat(lines)) end
    end
  end
  -- age batches are numbered by P:seq now (layout 4: P:bseq): past every batch number used before
  local seq, bseq = tonumber(redis.call('GET', P..':seq') or '0'), tonumber(redis.call('GET', P..':bseq') or '0')
  if bseq > seq then redis.call('SET', P..':seq', string.format('%d', bseq)) end
  redis.call('DEL', P..':bseq')
  redis.call('HSET', K_CFG, 'layout', '5')
  layout = '5'
end
if layout == '5' and ARGV[5] == '6' then
  -- layout 5 kept gq's members as "<host>\t<member>" and a LEASE call's lines as one string
  -- ("<id>\n<score>\n<host>\t<member>\n" a lease): gq's members carry their score now, and the lines are
  -- a list of those members (see prelude.lua); the rest of the layout is the same
  local K_GQ = P..':gq'
  local TMP = P..':gq:upgrade'
  redis.call('DEL', TMP)
  local n = redis.call('ZCARD', K_GQ)
  for i = 0, n - 1, 2000 do  -- a part's scores and members: one ZADD, at most 8,000 arguments from Lua
    local part = redis.call('ZRANGE', K_GQ, i, i + 1999, 'WITHSCORES')
    local add = {}
    for j = 1, #part, 2 do
      local m, score = part[j], part[j + 1]
      local host, member = string.match(m, '^([^\t]*)\t(.*)$')
      if host then m = host..'\t'..score..'\t'..member end
      add[#add + 1], add[#add + 2] = score, m
    end
    if #add > 0 then redis.call('ZADD', TMP, unpack(add)) end
  end
  if n > 0 then redis.call('RENAME', TMP, K_GQ) end
  local seen = {}
  for _, e in ipairs(redis.call('ZRANGE', P..':lexp', 0, -1)) do
    local ser = string.match(e, '^(%d+)')
    if ser and not seen[ser] then
      seen[ser] = true
      local key = P..':lb:'..ser
      if redis.call('TYPE', key).ok == 'string' then
        local lines = redis.call('GET', key)
        local list = {}
        for _, score, host, member in string.gmatch(lines, '([^\n]*)\n([^\n]*)\n([^\t\n]*)\t([^\n]*)\n') do
          list[#list + 1] = host..'\t'..score..'\t'..member
        end
        redis.call('DEL', key)
        for i = 1, #list, 4000 do redis.call('RPUSH', key, unpack(list, i, math.min(i + 3999, #list))) end
      end
    end
  end
  redis.call('HSET', K_CFG, 'layout', ARGV[5])
  layout = ARGV[5]
end
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
