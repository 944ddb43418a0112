-- BURY (after prelude.lua). ARGV[5] token, [6] reason. Moves a leased entry that could not be decoded aside.
local id, prio, host, member = lease_of(ARGV[5])
if not id then return 0 end
bury(id, ARGV[6], member)
robots_settled(host, id)
after_settle(host)
return 1
