/**
 * @internal Fences, shared by Lock, RwLock (write grants) and Semaphore: a number that strictly increases with
 * every grant of one name, also across idle expiry. It is the server time in µs, or the last fence plus
 * one if that is larger, kept in a key of the name's hash slot for as long as the lease.
 */
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import type * as Script from "../Script.js"

/**
 * @internal Lua: `fence(key, now, lease)` stores and returns the next fence (a decimal string) of the
 * fence key `key`, at server time `now` (µs), for `lease` ms. One `SET … GET` stores `now` and reads the
 * last fence; only when that is not below `now` (grants faster than one a microsecond, or a clock that
 * stepped back) a second `SET` stores the last fence plus one. `%d`: a fence from server µs has 16
 * digits, which Lua's default number format would round.
 */
export const FENCE_FUNCTION = `local function fence(key, now, lease)
  local next = string.format('%d', now)
  local last = redis.call('SET', key, next, 'PX', lease, 'GET')
  if last and tonumber(last) >= now then
    next = string.format('%d', tonumber(last) + 1)
    redis.call('SET', key, next, 'PX', lease)
  end
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
