-- now: the Redis server's clock, in milliseconds (a fragment for the scripts that need the time)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
