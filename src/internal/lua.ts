/**
 * @internal Lua shared by scripts.
 */

/** @internal Server time: sets `now` to the Redis server clock in whole microseconds. */
export const NOW_US = `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
`
