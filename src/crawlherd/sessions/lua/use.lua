-- KEYS[1]: the website's sessions hash; ARGV[1]: the session id.
-- Count one use of a live session; its JSON as now stored, or false when retired or gone.
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if not raw then return false end
local s = cjson.decode(raw)
if s['retired'] ~= cjson.null and s['retired'] ~= nil then return false end
s['uses'] = (s['uses'] or 0) + 1
raw = cjson.encode(s)
redis.call('HSET', KEYS[1], ARGV[1], raw)
return raw
