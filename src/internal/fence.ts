/**
 * @internal Fences, shared by Lock and RwLock (write grants): a number that strictly increases with
 * every grant of one name, also across idle expiry. It is the server time in µs, or the last fence plus
 * one if that is larger, kept in a key of the name's hash slot for as long as the lease.
 */
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import type * as Script from "../Script.js"

/**
 * @internal Lua: `fence(key, now, lease)` stores and returns the next fence (a decimal string) of the
 * fence key `key`, at server time `now` (µs), for `lease` ms. `%d`: a fence from server µs has 16 digits,
 * which Lua's default number format would round.
 */
export const FENCE_FUNCTION = `local function fence(key, now, lease)
  local next = now
  local last = redis.call('GET', key)
  if last and tonumber(last) >= next then next = tonumber(last) + 1 end
  next = string.format('%d', next)
  redis.call('SET', key, next, 'PX', lease)
  return next
end
`

/** @internal The twin of {@link FENCE_FUNCTION}. */
export const fence = (db: Script.Keyspace, key: string, now: number, lease: string): string => {
  let next = now
  const last = db.get(key)
  if (last !== null && Number(last) >= next) next = Number(last) + 1
  const decimal = String(next)
  db.set(key, decimal, { px: lease })
  return decimal
}

/** @internal Decodes a grant's reply: the fence (a decimal string) when granted, nil when refused. */
export const fenceReply = (reply: unknown): Either.Either<Option.Option<bigint>, string> =>
  reply === null
    ? Either.right(Option.none())
    : typeof reply === "string" && /^\d+$/.test(reply)
    ? Either.right(Option.some(BigInt(reply)))
    : Either.left("a fence (a decimal string) or nil")
