/**
 * @internal Lua snippets shared by scripts.
 */

/** @internal Server time: sets `now` to the Redis server clock in whole microseconds. */
export const NOW_US = `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
`

/**
 * @internal The body of a script's batch (`many`) variant: calls `fn` once per call laid end to end in
 * KEYS and ARGV (`keys` KEYS and `args` ARGV each), each protected, so one that fails (a key of the
 * wrong type, say) fails alone. Replies with one reply (or error reply) per call, in order. `fn` must
 * not return nil.
 */
export const MANY = (fn: string, keys: number, args: number) => {
  const list = (name: string, per: number) =>
    Array.from({ length: per }, (_, j) => `${name}[${per} * (i - 1) + ${j + 1}]`).join(", ")
  return `local replies = {}
for i = 1, #KEYS / ${keys} do
  local ok, reply = pcall(${fn}, ${list("KEYS", keys)}, ${list("ARGV", args)})
  if ok then
    replies[i] = reply
  elseif type(reply) == 'table' and reply.err then
    replies[i] = reply
  else
    replies[i] = redis.error_reply(tostring(reply))
  end
end
return replies
`
}
