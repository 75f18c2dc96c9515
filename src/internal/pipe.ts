/**
 * @internal Pipes. The receiver's state machine, and why it loses nothing:
 *
 * - Everything the receiver takes from `messages` is moved, atomically, to the tail of `inflight`
 *   (BLMOVE, or LPOP + RPUSH in FETCH), so `inflight` holds, in order, every message this receiver took
 *   and has not finished, behind a placeholder `!<mode>:<done>`.
 * - The receiver counts in memory the messages it finished since it opened (`done`: handed to the
 *   stream in at-most-once, pulled past in at-least-once; heartbeats and the close sentinel count too).
 *   FETCH and RELEASE drop the finished prefix of `inflight` up to that count; the placeholder records
 *   how many were already dropped, so a call whose reply was lost can be repeated safely.
 * - On release (every end of the stream, interruption included): the dedicated connection is killed
 *   first (`CLIENT KILL ID`, over the shared connection), so a BLMOVE still on its socket can no longer
 *   move anything; then RELEASE puts the unfinished messages back at the head of `messages`, in order;
 *   then the connection is dropped.
 */
import * as Channel from "effect/Channel"
import * as Chunk from "effect/Chunk"
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import * as Pipe from "../Pipe.js"
import * as Redis from "../Redis.js"
import * as access from "./access.js"
import { bounded, positive, toMillis } from "./duration.js"
import * as key from "./key.js"
import * as lease from "./lease.js"
import { MANY } from "./lua.js"
import * as memory from "./memory.js"

const KIND = "Pipe"

/** A pull's value at the close sentinel: the stream ends. */
const END: unique symbol = Symbol("wakuwaku/Pipe/end")

/** In-band sentinels and placeholders: never valid JSON, so never a payload. */
const CLOSE = "!close"
const BEAT = "!beat"

/** How many messages one FETCH moves: many when handing over is final, one when each waits for its ack. */
const BATCH = { "at-most-once": 64, "at-least-once": 1 } as const
/** The placeholder's mode: an at-most-once receiver's leftovers may have been handed over already. */
const MODE = { "at-most-once": "most", "at-least-once": "least" } as const

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
const alive = (db: memory.Db, inflight: string, ttl: string) => {
  db.pexpire(inflight, 2 * Number(ttl), true)
}
const send: memory.Twin = (db, [messages, closed, inflight], [payload, ttl]) => {
  if (db.exists(closed!) === 1) return 0
  if (db.lindex(messages!, -1) === CLOSE) return 0
  db.rpush(messages!, payload!)
  db.pexpire(messages!, ttl!)
  alive(db, inflight!, ttl!)
  return 1
}

/** @internal {@link SEND} for many calls at once (batched). */
export const SEND_MANY = memory.twin(Redis.script({
  name: "Pipe.sendMany",
  keys: 3,
  variadic: true,
  lua: `${SEND_FUNCTION}${MANY("send", 3, 2)}`
}), memory.many(send, 3, 2))

/**
 * @internal Appends a message unless the pipe is closed. KEYS[1] messages, KEYS[2] closed, KEYS[3]
 * inflight; ARGV[1] the payload, ARGV[2] the TTL (ms). Returns 1, or 0 when closed (dropped). Calls
 * made together (sends on several pipes) are batched into {@link SEND_MANY}.
 */
export const SEND = memory.twin(Redis.script({
  name: "Pipe.send",
  keys: 3,
  many: SEND_MANY,
  lua: `${SEND_FUNCTION}return send(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2])
`
}), send)

/**
 * @internal Closes the pipe: appends the close sentinel and sets the closed marker, both for one TTL.
 * KEYS[1] messages, KEYS[2] closed, KEYS[3] inflight; ARGV[1] the TTL (ms). Returns 1, or 0 when
 * already closed.
 */
export const CLOSE_SCRIPT = memory.twin(Redis.script({
  name: "Pipe.close",
  keys: 3,
  lua: `${ALIVE_FUNCTION}if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
redis.call('RPUSH', KEYS[1], '${CLOSE}')
redis.call('PEXPIRE', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], '1', 'PX', ARGV[1])
alive(KEYS[3], ARGV[1])
return 1
`
}), (db, [messages, closed, inflight], [ttl]) => {
  if (db.exists(closed!) === 1) return 0
  db.rpush(messages!, CLOSE)
  db.pexpire(messages!, ttl!)
  db.set(closed!, "1", { px: ttl! })
  alive(db, inflight!, ttl!)
  return 1
})

/**
 * @internal A heartbeat: restarts the TTL of the message list, and appends a beat sentinel when the
 * list is empty (so beats never pile up). KEYS[1] messages, KEYS[2] closed, KEYS[3] inflight; ARGV[1]
 * the TTL (ms). Returns 1, or 0 when closed (nothing done).
 */
export const BEAT_SCRIPT = memory.twin(Redis.script({
  name: "Pipe.beat",
  keys: 3,
  lua: `${ALIVE_FUNCTION}if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
if redis.call('LLEN', KEYS[1]) == 0 then redis.call('RPUSH', KEYS[1], '${BEAT}') end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
alive(KEYS[3], ARGV[1])
return 1
`
}), (db, [messages, closed, inflight], [ttl]) => {
  if (db.exists(closed!) === 1) return 0
  if (db.llen(messages!) === 0) db.rpush(messages!, BEAT)
  db.pexpire(messages!, ttl!)
  alive(db, inflight!, ttl!)
  return 1
})

/**
 * @internal Opens a receiver: takes the lease, deals with the leftovers of a receiver that died without
 * releasing (an at-least-once one's go back to the head of messages, in order; an at-most-once one's
 * may have been handed over, and are dropped), and starts an empty in-flight list. KEYS[1] receiver,
 * KEYS[2] inflight, KEYS[3] messages, KEYS[4] closed; ARGV[1] the token, ARGV[2] the TTL (ms), ARGV[3]
 * the mode (`most` or `least`), ARGV[4] the in-flight TTL (ms). Returns 1 when open, 0 when another
 * receiver holds the lease, 2 when the pipe is closed and drained (no lease is kept).
 */
export const OPEN = memory.twin(Redis.script({
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
`
}), (db, [receiver, inflight, messages, closed], [token, ttl, mode, inflightTtl]) => {
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
const fetch: memory.Twin = (db, [receiver, inflight, messages], [token, done, count]) => {
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

/** @internal {@link FETCH} for many calls at once (batched). */
export const FETCH_MANY = memory.twin(Redis.script({
  name: "Pipe.fetchMany",
  keys: 3,
  variadic: true,
  lua: `${FETCH_FUNCTION}${MANY("fetch", 3, 3)}`
}), memory.many(fetch, 3, 3))

/**
 * @internal Drops the finished prefix of inflight and moves up to ARGV[3] messages to its tail. KEYS[1]
 * receiver, KEYS[2] inflight, KEYS[3] messages; ARGV[1] the token, ARGV[2] how many messages the
 * receiver finished since it opened, ARGV[3] how many to move. Returns the moved payloads (maybe none),
 * or nil when the lease is not the token's. Calls made together (receivers of several pipes) are
 * batched into {@link FETCH_MANY}.
 */
export const FETCH = memory.twin(Redis.script({
  name: "Pipe.fetch",
  keys: 3,
  many: FETCH_MANY,
  lua: `${FETCH_FUNCTION}return fetch(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3])
`
}), fetch)

/**
 * @internal Renews the receiver's lease. KEYS[1] receiver, KEYS[2] inflight; ARGV[1] the token, ARGV[2]
 * the TTL (ms), ARGV[3] the in-flight TTL (ms). Returns 1, or 0 when the lease is not the token's.
 */
export const RENEW = memory.twin(Redis.script({
  name: "Pipe.renew",
  keys: 2,
  lua: `if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return 1
`
}), (db, [receiver, inflight], [token, ttl, inflightTtl]) => {
  if (db.get(receiver!) !== token) return 0
  db.pexpire(receiver!, ttl!)
  db.pexpire(inflight!, inflightTtl!)
  return 1
})

/**
 * @internal Releases a receiver: drops the finished prefix of inflight, puts the rest back at the head
 * of messages in order, deletes inflight and the lease. Runs unless another receiver holds the lease
 * (an expired lease still owns inflight: nobody else opened since). KEYS[1] receiver, KEYS[2] inflight,
 * KEYS[3] messages; ARGV[1] the token, ARGV[2] how many messages the receiver finished, ARGV[3] the TTL
 * (ms). Returns 1, or 0 when another receiver holds the lease (nothing done).
 */
export const RELEASE = memory.twin(Redis.script({
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
`
}), (db, [receiver, inflight, messages], [token, done, ttl]) => {
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
})

const unexpected = (operation: string, reply: unknown) =>
  new Redis.RedisError({ reason: "Reply", operation, cause: new Error(`unexpected reply ${JSON.stringify(reply)}`) })

/** @internal The keys of one name. */
interface Keys {
  readonly name: string
  readonly messages: string
  readonly closed: string
  readonly inflight: string
  readonly receiver: string
}

/**
 * @internal Why JSON would not give back exactly `value` (an encoded message), or undefined when it
 * would: strings, booleans, null, finite numbers (-0 arrives as 0, which every equivalence counts
 * equal), and dense arrays and plain objects of those. Anything else JSON loses or changes (NaN and the
 * infinities, undefined, bigints, functions, symbols, holes, instances such as a `Date` or a `Map`,
 * symbol keys, a value that contains itself), and the path to it, such as `message.items[2] is NaN`.
 */
export const lossOf = (value: unknown, path: string, parents: Array<object>): string | undefined => {
  switch (typeof value) {
    case "string":
    case "boolean":
      return undefined
    case "number":
      return Number.isFinite(value) ? undefined : `${path} is ${value}, which JSON writes as null`
    case "undefined":
      return `${path} is undefined, which JSON drops (omit it instead)`
    case "bigint":
      return `${path} is a bigint, which JSON cannot write (encode it as a string)`
    case "function":
    case "symbol":
      return `${path} is a ${typeof value}, which JSON drops`
  }
  if (value === null) return undefined
  const object = value as object
  if (parents.includes(object)) return `${path} contains itself, which JSON cannot write`
  parents.push(object)
  try {
    if (Array.isArray(object)) {
      for (let i = 0; i < object.length; i++) {
        if (!(i in object)) return `${path}[${i}] is a hole, which JSON writes as null`
        const loss = lossOf(object[i], `${path}[${i}]`, parents)
        if (loss !== undefined) return loss
      }
      return undefined
    }
    const proto = Object.getPrototypeOf(object)
    if (proto !== Object.prototype && proto !== null) {
      const kind = typeof proto?.constructor === "function" && proto.constructor.name !== "" ? proto.constructor.name : "object"
      return `${path} is an instance of ${kind}, which JSON does not keep`
    }
    if (Object.getOwnPropertySymbols(object).length > 0) return `${path} has symbol keys, which JSON drops`
    for (const key of Object.keys(object)) {
      const loss = lossOf((object as Record<string, unknown>)[key], `${path}.${key}`, parents)
      if (loss !== undefined) return loss
    }
    return undefined
  } finally {
    parents.pop()
  }
}

class PipeImpl<Name extends Redis.KeyName, A> implements Pipe.Pipe<Name, A> {
  readonly label: string
  readonly ttlMillis: number
  readonly encode: (a: A) => Either.Either<unknown, ParseResult.ParseError>
  readonly decodeJson: (u: unknown) => Either.Either<A, ParseResult.ParseError>
  constructor(readonly namespace: string, readonly schema: Pipe.MessageSchema<A>, readonly ttl: Duration.Duration) {
    this.label = `Pipe(${namespace})`
    this.ttlMillis = toMillis(ttl)
    // The encoded type is not named (Schema is invariant in it): rebuilt from the AST as unknown.
    const message = Schema.make<A, unknown, never>(schema.ast)
    this.encode = Schema.encodeEither(message)
    this.decodeJson = Schema.decodeUnknownEither(Schema.parseJson(message))
    Object.freeze(this)
  }

  keys(operation: string, name: Name): Either.Either<Keys, Redis.InvalidInput> {
    return Either.map(key.encodeNameOf(this.label, operation, name), (encoded) => ({
      name: encoded,
      messages: key.taggedKey(KIND, this.namespace, encoded, "messages"),
      closed: key.taggedKey(KIND, this.namespace, encoded, "closed"),
      inflight: key.taggedKey(KIND, this.namespace, encoded, "inflight"),
      receiver: key.taggedKey(KIND, this.namespace, encoded, "receiver")
    }))
  }

  /**
   * The JSON of a message's encoded form, or why it cannot travel: its encoding failed, or JSON would
   * not give back exactly that encoded form (see {@link lossOf}), so the receiver would not decode an
   * equal message.
   */
  payload(message: A): string | { readonly message: string } {
    const encoded = this.encode(message)
    if (Either.isLeft(encoded)) return { message: ParseResult.TreeFormatter.formatErrorSync(encoded.left) }
    const loss = lossOf(encoded.right, "message", [])
    return loss === undefined
      ? JSON.stringify(encoded.right)
      : { message: `the message would not arrive as sent: ${loss}` }
  }

  readonly send = (name: Name, message: A): Effect.Effect<void, Redis.RedisError | Redis.InvalidInput, Pipe.Requirements> => {
    const keys = this.keys("send", name)
    if (Either.isLeft(keys)) return Effect.fail(keys.left)
    const payload = this.payload(message)
    if (typeof payload !== "string") {
      return Effect.fail(
        new Redis.InvalidInput({ operation: `${this.label}.send`, argument: "message", message: payload.message })
      )
    }
    const { closed, inflight, messages } = keys.right
    const args = [payload, String(this.ttlMillis)]
    return access.write(Pipe.entity, (redis) => Effect.asVoid(redis.script(SEND, [messages, closed, inflight], args)))
  }

  readonly close = (name: Name): Effect.Effect<void, Redis.RedisError | Redis.InvalidInput, Pipe.Requirements> => {
    const keys = this.keys("close", name)
    if (Either.isLeft(keys)) return Effect.fail(keys.left)
    const { closed, inflight, messages } = keys.right
    return access.write(
      Pipe.entity,
      (redis) => Effect.asVoid(redis.script(CLOSE_SCRIPT, [messages, closed, inflight], [String(this.ttlMillis)]))
    )
  }

  readonly receive = (
    name: Name,
    options?: Pipe.ReceiveOptions
  ): Stream.Stream<A, Pipe.ReceiveError, Pipe.Requirements> => {
    const keys = this.keys("receive", name)
    if (Either.isLeft(keys)) return Stream.fail(keys.left)
    const delivery: unknown = options?.delivery
    if (delivery !== undefined && delivery !== "at-most-once" && delivery !== "at-least-once") {
      return Stream.fail(
        new Redis.InvalidInput({
          operation: `${this.label}.receive`,
          argument: "delivery",
          message: `delivery must be "at-most-once" or "at-least-once", got ${key.preview(delivery)}`
        })
      )
    }
    return Stream.unwrapScoped(
      Effect.flatMap(access.write(Pipe.entity, Effect.succeed), (redis) => receiver(this, keys.right, redis, options))
    )
  }

  toString() {
    return `${this.label}: ttl ${this.ttlMillis} ms`
  }
}

/**
 * The receiver, set up in the stream's scope: the dedicated connection, the lease (with its renewal)
 * and the release, then the stream of messages. Finalizers run in reverse order of registration:
 * renewal stopped, CLIENT KILL and RELEASE, connection dropped.
 */
const receiver = <Name extends Redis.KeyName, A>(
  pipe: PipeImpl<Name, A>,
  keys: Keys,
  redis: Redis.Redis,
  options: Pipe.ReceiveOptions | undefined
) =>
  Effect.gen(function*() {
    const delivery = options?.delivery ?? "at-most-once"
    const atLeastOnce = delivery === "at-least-once"
    const batch = String(BATCH[delivery])
    const ttl = String(pipe.ttlMillis)
    const inflightTtl = String(2 * pipe.ttlMillis)
    // BLMOVE's timeout is in seconds, decimals allowed.
    const blockSeconds = String(pipe.ttlMillis / 1000)
    const { closed, inflight, messages, receiver } = keys
    const busy = (reason: "Held" | "Lost") => new Pipe.PipeBusy({ pipe: pipe.label, name: keys.name, reason })

    const dedicated = yield* redis.dedicated(messages)
    const token = lease.secret()
    const state = {
      /** Messages finished since the receiver opened (see the module doc). */
      done: 0,
      /** At-least-once: the last message emitted is not finished until the next pull. */
      handed: false,
      /** Moved to inflight, not yet handed over. */
      buffer: [] as Array<string>,
      at: 0,
      lost: false
    }
    // CLIENT KILL from another connection ends a BLMOVE still on the dedicated socket for good.
    const kill = dedicated.kill
    const release = Effect.suspend(() =>
      Effect.zipRight(kill, Effect.ignore(redis.script(RELEASE, [receiver, inflight, messages], [token, String(state.done), ttl])))
    )
    // The lease runs from before the request that took it, at the latest.
    const opening = yield* Clock.currentTimeMillis
    const opened = yield* Effect.acquireRelease(
      Effect.flatMap(redis.script(OPEN, [receiver, inflight, messages, closed], [token, ttl, MODE[delivery], inflightTtl]), (reply) =>
        reply === 0 || reply === 1 || reply === 2 ? Effect.succeed(reply) : Effect.fail(unexpected(`script ${OPEN.name}`, reply))),
      (opened) => opened === 1 ? release : Effect.void
    )
    if (opened === 0) return yield* Effect.fail(busy("Held"))
    if (opened === 2) return Stream.empty

    // Renewal: the lease is lost when a renewal finds another token, or none could be confirmed for a
    // whole TTL (each renewal waits no longer than the time left). Then the blocked BLMOVE is cut off,
    // here and on the server, and the pull fails with PipeBusy (Lost).
    const renewEvery = Duration.millis(Math.max(1, Math.floor(pipe.ttlMillis / 3)))
    yield* Effect.forkScoped(Effect.gen(function*() {
      let confirmed = opening
      while (true) {
        yield* Effect.sleep(renewEvery)
        const sent = yield* Clock.currentTimeMillis
        const left = confirmed + pipe.ttlMillis - sent
        const renewed = left <= 0 ? Option.none() : yield* Effect.timeoutOption(
          Effect.either(redis.script(RENEW, [receiver, inflight], [token, ttl, inflightTtl])),
          Duration.millis(left)
        )
        if (Option.isSome(renewed) && Either.isRight(renewed.value) && renewed.value.right === 1) {
          confirmed = sent
        } else if (
          Option.isNone(renewed) || Either.isRight(renewed.value) ||
          (yield* Clock.currentTimeMillis) + Duration.toMillis(renewEvery) >= confirmed + pipe.ttlMillis
        ) {
          state.lost = true
          return yield* Effect.zipRight(dedicated.close, kill)
        }
      }
    }))

    const fetch = Effect.suspend(() => redis.script(FETCH, [receiver, inflight, messages], [token, String(state.done), batch]))
    // A lost lease ends the wait at once, whatever the server does with the BLMOVE: the renewal marks it
    // lost and then closes the connection, which fails the command here.
    const block = dedicated.command("BLMOVE", [messages, inflight, "LEFT", "RIGHT", blockSeconds])

    /** Hands over the next payload of the buffer, or says there is none (undefined). Synchronous. */
    const next = (): Effect.Effect<A | typeof END, Pipe.ReceiveError> | undefined => {
      while (state.at < state.buffer.length) {
        const raw = state.buffer[state.at++]!
        if (raw === BEAT) {
          state.done++
          continue
        }
        if (raw === CLOSE) {
          state.done++
          return Effect.succeed(END)
        }
        const decoded = pipe.decodeJson(raw)
        if (Either.isLeft(decoded)) {
          state.done++
          return Effect.fail(new Pipe.MessageError({ pipe: pipe.label, name: keys.name, raw, cause: decoded.left }))
        }
        if (atLeastOnce) state.handed = true
        else state.done++
        return Effect.succeed(decoded.right)
      }
      state.buffer = []
      state.at = 0
      return undefined
    }

    const failRedis = (error: Redis.RedisError) => Effect.fail(state.lost ? busy("Lost") : error)

    // Waits for Redis only inside `restore`; every change of `state` happens outside it, uninterruptibly,
    // so it always matches what Redis holds.
    const pull: Effect.Effect<A | typeof END, Pipe.ReceiveError> = Effect.uninterruptibleMask((restore) => {
      if (state.handed) {
        state.handed = false
        state.done++
      }
      const take = (): Effect.Effect<A | typeof END, Pipe.ReceiveError> => next() ?? fetching()
      const fetching = () =>
        Effect.matchEffect(restore(fetch), {
          onFailure: failRedis,
          onSuccess: (reply) => {
            if (reply === null) return Effect.fail(busy("Lost"))
            if (!Array.isArray(reply)) return Effect.fail(unexpected(`script ${FETCH.name}`, reply))
            if (reply.length === 0) return blocking()
            state.buffer = reply as Array<string>
            return take()
          }
        })
      const blocking = () =>
        Effect.matchEffect(restore(block), {
          onFailure: failRedis,
          onSuccess: (moved) => {
            if (moved === null) return Effect.fail(new Pipe.PipeAbandoned({ pipe: pipe.label, name: keys.name, ttl: pipe.ttl }))
            if (typeof moved !== "string") return Effect.fail(unexpected("BLMOVE", moved))
            state.buffer = [moved]
            return take()
          }
        })
      return take()
    })
    // One message per chunk (a consumer that stops early, say with `Stream.take`, leaves nothing handed
    // over and unread), as a channel that loops: cheaper per message than `Stream.repeatEffectOption`.
    const loop: Channel.Channel<Chunk.Chunk<A>, unknown, Pipe.ReceiveError, unknown, void, unknown> = Channel.flatMap(
      Channel.fromEffect(pull),
      (a) => a === END ? Channel.void : Channel.zipRight(Channel.write(Chunk.of(a)), Channel.suspend(() => loop))
    )
    return Stream.fromChannel(loop)
  })

/** @internal */
export const make = <Name extends Redis.KeyName, A>(
  namespace: string,
  schema: Pipe.MessageSchema<A>,
  ttl: Duration.DurationInput
): Pipe.Pipe<Name, A> =>
  new PipeImpl<Name, A>(key.validateNamespace(KIND, namespace), schema, bounded(ttl, `Pipe(${namespace}) ttl`))

/** @internal */
export const heartbeat = <Name extends Redis.KeyName, A>(
  pipe: Pipe.Pipe<Name, A>,
  name: Name,
  every: Duration.DurationInput | undefined
): Effect.Effect<never, Redis.RedisError | Redis.InvalidInput, Pipe.Requirements> => {
  const label = `Pipe(${pipe.namespace})`
  const ttlMillis = toMillis(pipe.ttl)
  const period = every === undefined
    ? Duration.millis(Math.max(1, Math.floor(ttlMillis / 3)))
    : positive(every, `${label} heartbeat period`)
  const encoded = key.encodeNameOf(label, "heartbeat", name)
  if (Either.isLeft(encoded)) return Effect.fail(encoded.left)
  const keys = [
    key.taggedKey(KIND, pipe.namespace, encoded.right, "messages"),
    key.taggedKey(KIND, pipe.namespace, encoded.right, "closed"),
    key.taggedKey(KIND, pipe.namespace, encoded.right, "inflight")
  ]
  const beat = access.write(Pipe.entity, (redis) => redis.script(BEAT_SCRIPT, keys, [String(ttlMillis)]))
  return Effect.forever(Effect.zipRight(beat, Effect.sleep(period)))
}

class DuplexImpl<Name extends Redis.KeyName, Out, In> implements Pipe.Duplex<Name, Out, In> {
  constructor(readonly outgoing: Pipe.Pipe<Name, Out>, readonly incoming: Pipe.Pipe<Name, In>) {
    Object.freeze(this)
  }
  get send() {
    return this.outgoing.send
  }
  get close() {
    return this.outgoing.close
  }
  get receive() {
    return this.incoming.receive
  }
  get flip(): Pipe.Duplex<Name, In, Out> {
    return new DuplexImpl(this.incoming, this.outgoing)
  }
}

/** @internal */
export const duplex = <Name extends Redis.KeyName, Out, In>(
  outgoing: Pipe.Pipe<Name, Out>,
  incoming: Pipe.Pipe<Name, In>
): Pipe.Duplex<Name, Out, In> => {
  if (outgoing.namespace === incoming.namespace) {
    throw new TypeError(
      `wakuwaku: Pipe.duplex needs two pipes with different namespaces, got ${JSON.stringify(outgoing.namespace)} twice`
    )
  }
  return new DuplexImpl(outgoing, incoming)
}
