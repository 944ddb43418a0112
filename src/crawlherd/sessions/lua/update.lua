-- KEYS[1]: the website's sessions hash; ARGV: id, cookies JSON or '', error '1'|'0', login epoch or '',
-- retire reason or ''. Change the session in one step; its JSON as now stored, or false when gone.
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if not raw then return false end
local s = cjson.decode(raw)
if ARGV[2] ~= '' then s['cookies'] = cjson.decode(ARGV[2]) end
if ARGV[3] == '1' then s['errors'] = (s['errors'] or 0) + 1 end
if ARGV[4] ~= '' then s['login_epoch'] = tonumber(ARGV[4]) end
if ARGV[5] ~= '' and (s['retired'] == nil or s['retired'] == cjson.null) then s['retired'] = ARGV[5] end
raw = cjson.encode(s)
redis.call('HSET', KEYS[1], ARGV[1], raw)
return raw
