/** @internal FixedWindow: its scripts (acquire, with its batch variant; peek) and their twins, and the window value. */
import * as Duration from "effect/Duration"
import * as Either from "effect/Either"
import * as Admission_ from "../Admission.js"
import * as Capability from "../Capability.js"
import type * as FixedWindow from "../FixedWindow.js"
import type * as Redis from "../Redis.js"
import type * as Script from "../Script.js"
import { MAX_MICROS, MAX_TEXT } from "./duration.js"
import * as key from "./key.js"
import * as limiter from "./limiter.js"
import * as limits from "./limits.js"
import { NOW_US } from "./lua.js"
import { define, manyLua, manyTwin, ReplyError } from "./script.js"
import { notCount } from "./validate.js"

const KIND = "FixedWindow"

/** @internal */
export const entity: FixedWindow.Entity = Capability.entity(KIND)

/** @internal */
export const TypeId: FixedWindow.TypeId = Symbol.for("wakuwaku/FixedWindow") as FixedWindow.TypeId

/** @internal */
export const isFixedWindow = (u: unknown): u is FixedWindow.FixedWindow<never> =>
  typeof u === "object" && u !== null && TypeId in u

/**
 * @internal Lua shared by the scripts, after {@link NOW_US}, which sets `now` (the group scripts of
 * ./limits.ts read `now` once and run these in a block of their own). A window's parameters travel
 * as one ARGV string, "<limit> <window µs>". Windows are aligned to server time: the one holding `now` starts at
 * `now - fmod(now, window)` (fmod is exact on doubles, where Lua's `%` is not). State is one string
 * "<window start µs> <count>", which expires when its window ends; a count of another window is zero.
 * - `used(key, start)` is the count of the window starting at `start`.
 * - `take(key, w, cost)` is one acquire; it returns three values: allowed (0|1), ms (until the window
 *   ends, rounded up: when allowed, when its count starts again; when denied, when to retry; -1 when
 *   cost > limit), remaining (never below 0, even if the limit was lowered mid-window). A denial writes
 *   nothing.
 */
const FUNCTIONS_AT_NOW = `local windows = {}
local function window(s)
  local w = windows[s]
  if w then return w end
  local limit, size = string.match(s, '^(%d+) (%d+)$')
  w = {limit = tonumber(limit), size = tonumber(size)}
  windows[s] = w
  return w
end
local function used(key, start)
  local state = redis.call('GET', key)
  if not state then return 0 end
  local sp = string.find(state, ' ', 1, true)
  if tonumber(string.sub(state, 1, sp - 1)) ~= start then return 0 end
  return tonumber(string.sub(state, sp + 1))
end
local function take(key, w, cost)
  local start = now - math.fmod(now, w.size)
  local count = used(key, start)
  local left = math.ceil((start + w.size - now) / 1000)
  local remaining = math.max(0, w.limit - count)
  if cost > w.limit then return 0, -1, remaining end
  if cost > remaining then return 0, left, remaining end
  if cost > 0 then
    count = count + cost
    local state = string.format('%d', start) .. ' ' .. string.format('%d', count)
    redis.call('SET', key, state, 'PX', string.format('%d', left))
  end
  return 1, left, remaining - cost
end
`
const FUNCTIONS = `${NOW_US}${FUNCTIONS_AT_NOW}`

/** The twin of FUNCTIONS (memory.ts). */
interface Window {
  readonly limit: number
  readonly size: number
}
const windowOf = (s: string): Window => {
  const m = /^(\d+) (\d+)$/.exec(s)
  if (m === null) throw new ReplyError(`ERR bad window ${JSON.stringify(s)}`)
  return { limit: Number(m[1]), size: Number(m[2]) }
}
const usedTwin = (db: Script.Keyspace, key: string, start: number): number => {
  const state = db.get(key)
  if (state === null) return 0
  const sp = state.indexOf(" ")
  if (Number(state.slice(0, sp)) !== start) return 0
  return Number(state.slice(sp + 1))
}
const take = (db: Script.Keyspace, key: string, w: Window, cost: number): Script.Reply => {
  const start = db.now - db.now % w.size
  let count = usedTwin(db, key, start)
  const left = Math.ceil((start + w.size - db.now) / 1000)
  const remaining = Math.max(0, w.limit - count)
  if (cost > w.limit) return [0, -1, remaining]
  if (cost > remaining) return [0, left, remaining]
  if (cost > 0) {
    count = count + cost
    db.set(key, `${start} ${count}`, { px: left })
  }
  return [1, left, remaining - cost]
}
const acquireTwin: Script.Twin = (db, keys, argv) => take(db, keys[0]!, windowOf(argv[0]!), Number(argv[1]))

const { Allowed } = Admission_.Admission

/** Decodes {allowed, ms, remaining}: an allowed acquire's ms is when its window ends (`resetAfter`). */
const admission = (reply: unknown): Either.Either<Admission_.Admission, string> =>
  Either.map(limiter.admission(reply), (decoded) =>
    decoded._tag === "Allowed" && Array.isArray(reply)
      ? Allowed({ remaining: decoded.remaining, resetAfter: Duration.millis(reply[1] as number) })
      : decoded)

/**
 * The window as a member of several limits decided as one (./limits.ts): its own acquire's condition and
 * wait (cost ≤ limit and cost ≤ what is left; else until the window ends, -1 when cost > limit), and a
 * refund of the window spent from only: its count less the cost (never below 0; deleted at 0), while that
 * window lasts; a window that has ended has nothing to give back.
 */
limits.register<Window>({
  kind: KIND,
  letter: "W",
  lua: `${FUNCTIONS_AT_NOW}local function current(w) return now - math.fmod(now, w.size) end
families['W'] = {
  parse = window,
  wait = function(key, w, cost)
    if cost > w.limit then return -1 end
    local start = current(w)
    if cost > math.max(0, w.limit - used(key, start)) then return math.ceil((start + w.size - now) / 1000) end
    return 0
  end,
  take = take,
  left = function(key, w) return math.max(0, w.limit - used(key, current(w))) end,
  start = current,
  refund = function(key, w, cost, start)
    local count = used(key, start)
    local left = math.ceil((start + w.size - now) / 1000)
    if count > 0 and left > 0 then
      count = math.max(0, count - cost)
      if count == 0 then
        redis.call('DEL', key)
      else
        redis.call('SET', key, string.format('%d', start) .. ' ' .. string.format('%d', count), 'PX',
          string.format('%d', left))
      end
    end
  end
}
`,
  twin: {
    parse: windowOf,
    wait: (db, key, w, cost) => {
      if (cost > w.limit) return -1
      const start = db.now - db.now % w.size
      return cost > Math.max(0, w.limit - usedTwin(db, key, start)) ? Math.ceil((start + w.size - db.now) / 1000) : 0
    },
    take: (db, key, w, cost) => take(db, key, w, cost) as ReadonlyArray<number>,
    left: (db, key, w) => Math.max(0, w.limit - usedTwin(db, key, db.now - db.now % w.size)),
    start: (db, w) => db.now - db.now % w.size,
    refund: (db, key, w, cost, start) => {
      let count = usedTwin(db, key, start)
      const left = Math.ceil((start + w.size - db.now) / 1000)
      if (count > 0 && left > 0) {
        count = Math.max(0, count - cost)
        if (count === 0) db.del(key)
        else db.set(key, `${start} ${count}`, { px: left })
      }
    }
  }
})

/**
 * @internal Counts `cost` in the current window if it stays within the limit; a denial writes nothing.
 * KEYS[1] the name's window; ARGV[1] "<limit> <window µs>", ARGV[2] the cost (whole units).
 * Returns {1, ms, remaining} if allowed, {0, ms, remaining} if denied (ms: until the window ends,
 * rounded up: the allowed count starts again then, the denied one may retry), ms -1 when cost > limit
 * (never). Calls made together are batched: its `many` variant runs many acquires of one window at one
 * server time, each protected (KEYS the windows, ARGV[1] the window's parameters, once, then each call's
 * cost), and replies, per call, the same three values, or an error reply.
 */
export const ACQUIRE = define({
  name: "FixedWindow.acquire",
  keys: 1,
  lua: `${FUNCTIONS}return {take(KEYS[1], window(ARGV[1]), tonumber(ARGV[2]))}
`,
  twin: acquireTwin,
  decode: admission,
  many: {
    // Every call replies its table: an allowed one says when its window ends, which a bare count would not.
    lua: `${FUNCTIONS}local function call(key, params, cost) return {take(key, window(params), tonumber(cost))} end
${manyLua("call", 1, 1, 1)}`,
    twin: manyTwin(acquireTwin, 1, 1, 1),
    // The window's parameters go once per batch, not once per call.
    shared: 1
  }
})

/**
 * @internal What is left in the current window, without counting. KEYS[1] the window; ARGV[1] "<limit> <window µs>".
 */
export const PEEK = define({
  name: "FixedWindow.peek",
  keys: 1,
  readOnly: true,
  lua: `${FUNCTIONS}local w = window(ARGV[1])
return math.max(0, w.limit - used(KEYS[1], now - math.fmod(now, w.size)))
`,
  twin: (db, keys, argv) => {
    const w = windowOf(argv[0]!)
    return Math.max(0, w.limit - usedTwin(db, keys[0]!, db.now - db.now % w.size))
  },
  decode: limiter.count
})

class WindowImpl<Name extends Redis.KeyName> extends limiter.Limiter<Name, FixedWindow.Entity>
  implements FixedWindow.FixedWindow<Name>
{
  readonly [TypeId]: FixedWindow.TypeId = TypeId
  constructor(namespace: string, readonly limit: number, readonly window: Duration.Duration, micros: bigint) {
    // The scripts take the window as "<limit> <window µs>".
    super(KIND, entity, namespace, `${limit} ${micros}`, { acquire: ACQUIRE, peek: PEEK }, {
      quota: limit,
      window,
      // An admission always says when its window ends; one made otherwise reads as the whole window.
      resetAfter: (allowed) => allowed.resetAfter ?? window
    })
    Object.freeze(this)
  }

  override toString() {
    return `${this.label}: ${this.limit} per ${Duration.format(this.window)}`
  }
}

/** @internal */
export const make = <Name extends Redis.KeyName>(
  namespace: string,
  limit: number,
  window: Duration.DurationInput
): FixedWindow.FixedWindow<Name> => {
  key.validateNamespace(KIND, namespace)
  const wrong = notCount("limit", limit, 0)
  if (wrong !== undefined) throw new RangeError(`wakuwaku: FixedWindow(${namespace}) ${wrong}`)
  const decoded = Duration.decodeUnknown(window)
  const nanos = decoded._tag === "Some" ? Duration.toNanos(decoded.value) : undefined
  if (
    nanos === undefined || nanos._tag === "None" || nanos.value % 1000n !== 0n || nanos.value < 1000n ||
    nanos.value / 1000n > MAX_MICROS
  ) {
    throw new RangeError(
      `wakuwaku: FixedWindow(${namespace}) window must be a whole number of microseconds from 1 µs to ${MAX_TEXT}, ` +
        `got ${decoded._tag === "Some" ? Duration.format(decoded.value) : String(window)}`
    )
  }
  return new WindowImpl<Name>(namespace, limit, Duration.nanos(nanos.value), nanos.value / 1000n)
}

/** The command line's `--algorithm fixed-window`. */
limiter.registerAlgorithm<{ readonly limit: number; readonly window: Duration.Duration }>({
  name: "fixed-window",
  title: "fixed window",
  example: "--limit 5 --window 10s",
  flags: {
    limit: { ...limiter.values.count, value: "N", env: "WAKUWAKU_LIMIT", default: "20", help: "requests per window" },
    window: { ...limiter.values.duration, value: "DURATION", env: "WAKUWAKU_WINDOW", default: "1m", help: "the window" }
  },
  make: (namespace, { limit, window }) => make<string>(namespace, limit, window),
  summary: ({ limit, window }) => `${limit} per ${Duration.format(window)}`,
  burst: ({ limit }) => limit
})
