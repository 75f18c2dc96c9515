/**
 * @internal The Pipe's scripts, their twins and decoders, and the in-band values they share with the
 * receiver. What each key holds and why nothing is lost: internal/pipe/receiver.ts.
 */
import * as Either from "effect/Either"
import type * as Script from "../../Script.js"
import { define, flag, manyLua, manyTwin } from "../script.js"

/** In-band sentinels and placeholders: never valid JSON, so never a payload. */
export const CLOSE = "!close"
export const BEAT = "!beat"

/** How many messages one FETCH moves: many when handing over is final, one when each waits for its ack. */
export const BATCH = { "at-most-once": 64, "at-least-once": 1 } as const
/** The placeholder's mode: an at-most-once receiver's leftovers may have been handed over already. */
export const MODE = { "at-most-once": "most", "at-least-once": "least" } as const

const sentOrDropped = (reply: unknown): Either.Either<void, string> =>
  reply === 0 || reply === 1 ? Either.void : Either.left("1 or 0")

/** @internal OPEN's reply: 1 open, 0 held by another receiver, 2 closed and drained. */
const opened = (reply: unknown): Either.Either<0 | 1 | 2, string> =>
  reply === 0 || reply === 1 || reply === 2 ? Either.right(reply) : Either.left("0, 1 or 2")

/** @internal FETCH's reply: the payloads moved (maybe none), or null when the lease is not the token's. */
const fetched = (reply: unknown): Either.Either<ReadonlyArray<string> | null, string> =>
  reply === null || (Array.isArray(reply) && reply.every((item) => typeof item === "string"))
    ? Either.right(reply)
    : Either.left("an array of payloads, or nil")

/**
 * `alive(inflight, ttl)`: while the pipe lives, a crashed receiver's unfinished messages live too (for
 * the next receiver): every send, close and beat keeps an existing in-flight list for two TTLs.
 */
const ALIVE_FUNCTION = `local function alive(inflight, ttl)
  redis.call('PEXPIRE', inflight, 2 * tonumber(ttl), 'GT')
end
`

const SEND_FUNCTION = `${ALIVE_FUNCTION}local function send(messages, closed, inflight, payload, ttl)
  if redis.call('EXISTS', closed) == 1 then return 0 end
  -- A close sentinel restored past its marker's expiry still closes the pipe.
  if redis.call('LINDEX', messages, -1) == '${CLOSE}' then return 0 end
  redis.call('RPUSH', messages, payload)
  redis.call('PEXPIRE', messages, ttl)
  alive(inflight, ttl)
  return 1
end
`

/** The twins of ALIVE_FUNCTION and SEND_FUNCTION (memory.ts). */
const alive = (db: Script.Keyspace, inflight: string, ttl: string) => {
  db.pexpire(inflight, 2 * Number(ttl), true)
}
const send: Script.Twin = (db, [messages, closed, inflight], [payload, ttl]) => {
  if (db.exists(closed!) === 1) return 0
  if (db.lindex(messages!, -1) === CLOSE) return 0
  db.rpush(messages!, payload!)
  db.pexpire(messages!, ttl!)
  alive(db, inflight!, ttl!)
  return 1
}

/**
 * @internal Appends a message unless the pipe is closed. KEYS[1] messages, KEYS[2] closed, KEYS[3]
 * inflight; ARGV[1] the payload, ARGV[2] the TTL (ms). Returns 1, or 0 when closed (dropped). Calls
 * made together (sends on several pipes) are batched (its `many` variant).
 */
export const SEND = define({
  name: "Pipe.send",
  keys: 3,
  lua: `${SEND_FUNCTION}return send(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2])
`,
  twin: send,
  decode: sentOrDropped,
  many: { lua: `${SEND_FUNCTION}${manyLua("send", 3, 2)}`, twin: manyTwin(send, 3, 2) }
})

/**
 * @internal Closes the pipe: appends the close sentinel and sets the closed marker, both for one TTL.
 * KEYS[1] messages, KEYS[2] closed, KEYS[3] inflight; ARGV[1] the TTL (ms). Returns 1, or 0 when
 * already closed.
 */
export const CLOSE_SCRIPT = define({
  name: "Pipe.close",
  keys: 3,
  lua: `${ALIVE_FUNCTION}if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
redis.call('RPUSH', KEYS[1], '${CLOSE}')
redis.call('PEXPIRE', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], '1', 'PX', ARGV[1])
alive(KEYS[3], ARGV[1])
return 1
`,
  twin: (db, [messages, closed, inflight], [ttl]) => {
    if (db.exists(closed!) === 1) return 0
    db.rpush(messages!, CLOSE)
    db.pexpire(messages!, ttl!)
    db.set(closed!, "1", { px: ttl! })
    alive(db, inflight!, ttl!)
    return 1
  },
  decode: sentOrDropped
})

/**
 * @internal A heartbeat: restarts the TTL of the message list, and appends a beat sentinel when the
 * list is empty (so beats never pile up). KEYS[1] messages, KEYS[2] closed, KEYS[3] inflight; ARGV[1]
 * the TTL (ms). Returns 1, or 0 when closed (nothing done).
 */
export const BEAT_SCRIPT = define({
  name: "Pipe.beat",
  keys: 3,
  lua: `${ALIVE_FUNCTION}if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
if redis.call('LLEN', KEYS[1]) == 0 then redis.call('RPUSH', KEYS[1], '${BEAT}') end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
alive(KEYS[3], ARGV[1])
return 1
`,
  twin: (db, [messages, closed, inflight], [ttl]) => {
    if (db.exists(closed!) === 1) return 0
    if (db.llen(messages!) === 0) db.rpush(messages!, BEAT)
    db.pexpire(messages!, ttl!)
    alive(db, inflight!, ttl!)
    return 1
  },
  decode: sentOrDropped
})

/**
 * @internal Opens a receiver: takes the lease, deals with the leftovers of a receiver that died without
 * releasing (an at-least-once one's go back to the head of messages, in order; an at-most-once one's
 * may have been handed over, and are dropped), and starts an empty in-flight list. KEYS[1] receiver,
 * KEYS[2] inflight, KEYS[3] messages, KEYS[4] closed; ARGV[1] the token, ARGV[2] the TTL (ms), ARGV[3]
 * the mode (`most` or `least`), ARGV[4] the in-flight TTL (ms). Returns 1 when open, 0 when another
 * receiver holds the lease, 2 when the pipe is closed and drained (no lease is kept).
 */
export const OPEN = define({
  name: "Pipe.open",
  keys: 4,
  lua: `if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end
local items = redis.call('LRANGE', KEYS[2], 0, -1)
if #items > 0 then
  local mode = string.match(items[1], '^!(%a+):%d+$')
  if mode ~= 'most' then
    local from = mode and 2 or 1
    for i = #items, from, -1 do redis.call('LPUSH', KEYS[3], items[i]) end
    if #items >= from then redis.call('PEXPIRE', KEYS[3], ARGV[2]) end
  end
  redis.call('DEL', KEYS[2])
end
if redis.call('EXISTS', KEYS[4]) == 1 and redis.call('EXISTS', KEYS[3]) == 0 then
  redis.call('DEL', KEYS[1])
  return 2
end
redis.call('RPUSH', KEYS[2], '!' .. ARGV[3] .. ':0')
redis.call('PEXPIRE', KEYS[2], ARGV[4])
return 1
`,
  twin: (db, [receiver, inflight, messages, closed], [token, ttl, mode, inflightTtl]) => {
    if (db.set(receiver!, token!, { nx: true, px: ttl! }) === null) return 0
    const items = db.lrange(inflight!, 0, -1)
    if (items.length > 0) {
      const left = /^!([A-Za-z]+):\d+$/.exec(items[0]!)?.[1]
      if (left !== "most") {
        // Lua's 1-based `from`: skip the placeholder when there is one.
        const from = left !== undefined ? 2 : 1
        for (let i = items.length; i >= from; i--) db.lpush(messages!, items[i - 1]!)
        if (items.length >= from) db.pexpire(messages!, ttl!)
      }
      db.del(inflight!)
    }
    if (db.exists(closed!) === 1 && db.exists(messages!) === 0) {
      db.del(receiver!)
      return 2
    }
    db.rpush(inflight!, `!${mode}:0`)
    db.pexpire(inflight!, inflightTtl!)
    return 1
  },
  decode: opened
})

const FETCH_FUNCTION = `local function fetch(receiver, inflight, messages, token, done, count)
  if redis.call('GET', receiver) ~= token then return false end
  local mode, last = string.match(redis.call('LINDEX', inflight, 0) or '', '^!(%a+):(%d+)$')
  if not mode then return false end
  local drop = tonumber(done) - tonumber(last)
  if drop > 0 then
    redis.call('LSET', inflight, drop, '!' .. mode .. ':' .. done)
    redis.call('LTRIM', inflight, drop, -1)
  end
  local moved = redis.call('LPOP', messages, count)
  if not moved then return {} end
  redis.call('RPUSH', inflight, unpack(moved))
  return moved
end
`

/** The twin of FETCH_FUNCTION (memory.ts). */
const PLACEHOLDER = /^!([A-Za-z]+):(\d+)$/
const fetch: Script.Twin = (db, [receiver, inflight, messages], [token, done, count]) => {
  if (db.get(receiver!) !== token) return null
  const [, mode, last] = PLACEHOLDER.exec(db.lindex(inflight!, 0) ?? "") ?? []
  if (mode === undefined) return null
  const drop = Number(done) - Number(last)
  if (drop > 0) {
    db.lset(inflight!, drop, `!${mode}:${done}`)
    db.ltrim(inflight!, drop, -1)
  }
  const moved = db.lpop(messages!, count!)
  if (moved === null) return []
  db.rpush(inflight!, ...moved)
  return moved
}

/**
 * @internal Drops the finished prefix of inflight and moves up to ARGV[3] messages to its tail. KEYS[1]
 * receiver, KEYS[2] inflight, KEYS[3] messages; ARGV[1] the token, ARGV[2] how many messages the
 * receiver finished since it opened, ARGV[3] how many to move. Returns the moved payloads (maybe none),
 * or nil when the lease is not the token's. Calls made together (receivers of several pipes)
 * are batched (its `many` variant).
 */
export const FETCH = define({
  name: "Pipe.fetch",
  keys: 3,
  lua: `${FETCH_FUNCTION}return fetch(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3])
`,
  twin: fetch,
  decode: fetched,
  many: { lua: `${FETCH_FUNCTION}${manyLua("fetch", 3, 3)}`, twin: manyTwin(fetch, 3, 3) }
})

/**
 * @internal Renews the receiver's lease. KEYS[1] receiver, KEYS[2] inflight; ARGV[1] the token, ARGV[2]
 * the TTL (ms), ARGV[3] the in-flight TTL (ms). Returns 1, or 0 when the lease is not the token's.
 */
export const RENEW = define({
  name: "Pipe.renew",
  keys: 2,
  lua: `if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return 1
`,
  twin: (db, [receiver, inflight], [token, ttl, inflightTtl]) => {
    if (db.get(receiver!) !== token) return 0
    db.pexpire(receiver!, ttl!)
    db.pexpire(inflight!, inflightTtl!)
    return 1
  },
  decode: flag
})

/**
 * @internal Releases a receiver: drops the finished prefix of inflight, puts the rest back at the head
 * of messages in order, deletes inflight and the lease. Runs unless another receiver holds the lease
 * (an expired lease still owns inflight: nobody else opened since). KEYS[1] receiver, KEYS[2] inflight,
 * KEYS[3] messages; ARGV[1] the token, ARGV[2] how many messages the receiver finished, ARGV[3] the TTL
 * (ms). Returns 1, or 0 when another receiver holds the lease (nothing done).
 */
export const RELEASE = define({
  name: "Pipe.release",
  keys: 3,
  lua: `local owner = redis.call('GET', KEYS[1])
if owner and owner ~= ARGV[1] then return 0 end
local items = redis.call('LRANGE', KEYS[2], 0, -1)
local last = string.match(items[1] or '', '^!%a+:(%d+)$')
if last then
  local from = 2 + tonumber(ARGV[2]) - tonumber(last)
  for i = #items, from, -1 do redis.call('LPUSH', KEYS[3], items[i]) end
  if #items >= from then redis.call('PEXPIRE', KEYS[3], ARGV[3]) end
  redis.call('DEL', KEYS[2])
end
if owner then redis.call('DEL', KEYS[1]) end
return 1
`,
  twin: (db, [receiver, inflight, messages], [token, done, ttl]) => {
    const owner = db.get(receiver!)
    if (owner !== null && owner !== token) return 0
    const items = db.lrange(inflight!, 0, -1)
    const last = /^![A-Za-z]+:(\d+)$/.exec(items[0] ?? "")?.[1]
    if (last !== undefined) {
      const from = 2 + Number(done) - Number(last)
      for (let i = items.length; i >= from; i--) db.lpush(messages!, items[i - 1]!)
      if (items.length >= from) db.pexpire(messages!, ttl!)
      db.del(inflight!)
    }
    if (owner !== null) db.del(receiver!)
    return 1
  },
  decode: flag
})
