-- POLICY (after prelude.lua). ARGV[5] host, [6] delay ('' keep), [7] cap ('' keep).
local host = ARGV[5]
if ARGV[6] ~= '' then redis.call('HSET', K_PDELAY, host, ARGV[6]) end
if ARGV[7] ~= '' then redis.call('HSET', K_PCAP, host, ARGV[7]) end
schedule(host)
return 1
