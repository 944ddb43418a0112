-- PEEK. ARGV[1] prefix. Returns queued, in flight, and the next time something may become ready ('' none).
local P = ARGV[1]
local queued = redis.call('HGET', P..':c', 'queued') or '0'
local inflight = tonumber(redis.call('HGET', P..':c', 'out') or '0')
local wake = nil
for _, key in ipairs({P..':timers', P..':delayed', P..':lexp'}) do
  local head = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if #head > 0 then
    local t = tonumber(head[2])
    if wake == nil or t < wake then wake = t end
  end
end
local w = ''
if wake then w = string.format('%.17g', wake) end
return {queued, inflight, w}
