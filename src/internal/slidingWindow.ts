/**
 * @internal SlidingWindow: its scripts (acquire, with its batch variant; peek) and their twins, its family in
 * a group (./limits.ts), its algorithm on the command line, and the limiter value.
 */
import * as Duration from "effect/Duration"
import * as Either from "effect/Either"
import * as Admission_ from "../Admission.js"
import type * as Redis from "../Redis.js"
import * as Script from "../Script.js"
import type * as SlidingWindow from "../SlidingWindow.js"
import { MAX_MICROS, MAX_TEXT } from "./duration.js"
import * as key from "./key.js"
import * as limiter from "./limiter.js"
import * as limits from "./limits.js"
import { NOW_US } from "./lua.js"
import { define, manyLua, manyTwin } from "./script.js"
import { isCount } from "./validate.js"

const KIND = "SlidingWindow"

/** @internal The largest limit: a name holds up to this many entries (see the module doc of SlidingWindow.ts). */
export const MAX_LIMIT = 10_000

/** @internal */
export const entity = Object.freeze({ kind: KIND }) as SlidingWindow.Entity

/** @internal */
export const TypeId: SlidingWindow.TypeId = Symbol.for("wakuwaku/SlidingWindow") as SlidingWindow.TypeId

/** @internal */
export const isSlidingWindow = (u: unknown): u is SlidingWindow.SlidingWindow<never> =>
  typeof u === "object" && u !== null && TypeId in u

/**
 * @internal Lua shared by the scripts, after {@link NOW_US}, which sets `now` (the group scripts of ./limits.ts
 * read `now` once and run these in a block of their own). A window's parameters travel as one ARGV string,
 * "<limit> <window µs>". State is one list per name: element 0 the total cost of its entries, then one entry
 * per allowed acquire of a cost above 0, "<t µs> <cost>", oldest first. An entry counts from its `t`
 * until `t + window` (then it has expired); the list expires when its newest entry does. Expired entries are
 * dropped by the next allowed acquire; until then the functions skip them.
 * - `walk(key, w, total, cost)`: over the entries oldest first: how many have expired and their cost; then,
 *   if `cost` does not fit in what the live ones leave, the server time (µs) at which it does: the end of the
 *   live entry whose expiry frees enough (nil when it fits now).
 * - `take(key, w, cost)` is one acquire; it returns three values: allowed (0|1), ms (when allowed: until the
 *   quota is whole again, the newest entry's end, 0 when there is none; when denied: until the cost fits,
 *   -1 when cost > limit), remaining (never below 0). A denial writes nothing. Sets `stamp`, the entry's `t`.
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
local stamp = now
local function entry(e)
  local sp = string.find(e, ' ', 1, true)
  return tonumber(string.sub(e, 1, sp - 1)), tonumber(string.sub(e, sp + 1))
end
local function total_of(key)
  local h = redis.call('LINDEX', key, 0)
  if not h then return 0 end
  return tonumber(h)
end
local function walk(key, w, total, cost)
  local n, gone, freed, need, i = 0, 0, 0, nil, 1
  while true do
    local chunk = redis.call('LRANGE', key, i, i + 63)
    if #chunk == 0 then return n, gone, nil end
    for _, e in ipairs(chunk) do
      local t, c = entry(e)
      if need == nil and t + w.size <= now then
        n, gone = n + 1, gone + c
      else
        if need == nil then need = total - gone + cost - w.limit end
        if need <= 0 then return n, gone, nil end
        freed = freed + c
        if freed >= need then return n, gone, t + w.size end
      end
    end
    i = i + 64
  end
end
local function ms(at) return math.ceil((at - now) / 1000) end
local function take(key, w, cost)
  local total = total_of(key)
  local n, gone, at = walk(key, w, total, cost)
  local live = total - gone
  local remaining = math.max(0, w.limit - live)
  if cost > w.limit then return 0, -1, remaining end
  if at then return 0, ms(at), remaining end
  local last = nil
  if total > 0 then last = entry(redis.call('LINDEX', key, -1)) end
  stamp = now
  if last and last > now then stamp = last end
  if cost == 0 then
    if live == 0 then return 1, 0, remaining end
    return 1, ms(last + w.size), remaining
  end
  if total == 0 then
    redis.call('RPUSH', key, '0')
  elseif n > 0 then
    redis.call('LTRIM', key, n, -1)
  end
  redis.call('RPUSH', key, string.format('%d', stamp) .. ' ' .. string.format('%d', cost))
  redis.call('LSET', key, 0, string.format('%d', live + cost))
  local left = ms(stamp + w.size)
  redis.call('PEXPIRE', key, string.format('%d', left))
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
  if (m === null) throw new Script.ReplyError(`ERR bad window ${JSON.stringify(s)}`)
  return { limit: Number(m[1]), size: Number(m[2]) }
}
/** The `t` of the entry the last take wrote (Lua's `stamp`); a twin runs synchronously, as a script does. */
let stamp = 0
const entryOf = (e: string): [number, number] => {
  const sp = e.indexOf(" ")
  return [Number(e.slice(0, sp)), Number(e.slice(sp + 1))]
}
const totalOf = (db: Script.Keyspace, key: string): number => {
  const h = db.lindex(key, 0)
  return h === null ? 0 : Number(h)
}
const walk = (
  db: Script.Keyspace,
  key: string,
  w: Window,
  total: number,
  cost: number
): [number, number, number | undefined] => {
  let [n, gone, freed] = [0, 0, 0]
  let need: number | undefined
  for (let i = 1;; i += 64) {
    const chunk = db.lrange(key, i, i + 63)
    if (chunk.length === 0) return [n, gone, undefined]
    for (const e of chunk) {
      const [t, c] = entryOf(e)
      if (need === undefined && t + w.size <= db.now) {
        n++
        gone += c
      } else {
        if (need === undefined) need = total - gone + cost - w.limit
        if (need <= 0) return [n, gone, undefined]
        freed += c
        if (freed >= need) return [n, gone, t + w.size]
      }
    }
  }
}
const msTo = (db: Script.Keyspace, at: number) => Math.ceil((at - db.now) / 1000)
const take = (db: Script.Keyspace, key: string, w: Window, cost: number): [number, number, number] => {
  const total = totalOf(db, key)
  const [n, gone, at] = walk(db, key, w, total, cost)
  const live = total - gone
  const remaining = Math.max(0, w.limit - live)
  if (cost > w.limit) return [0, -1, remaining]
  if (at !== undefined) return [0, msTo(db, at), remaining]
  const last = total > 0 ? entryOf(db.lindex(key, -1)!)[0] : undefined
  stamp = last !== undefined && last > db.now ? last : db.now
  if (cost === 0) return live === 0 ? [1, 0, remaining] : [1, msTo(db, last! + w.size), remaining]
  if (total === 0) db.rpush(key, "0")
  else if (n > 0) db.ltrim(key, n, -1)
  db.rpush(key, `${stamp} ${cost}`)
  db.lset(key, 0, String(live + cost))
  const left = msTo(db, stamp + w.size)
  db.pexpire(key, left)
  return [1, left, remaining - cost]
}
const acquireTwin: Script.Twin = (db, keys, argv) => take(db, keys[0]!, windowOf(argv[0]!), Number(argv[1]))
/** What is left now: the limit less the live entries' cost. */
const leftTwin = (db: Script.Keyspace, key: string, w: Window): number => {
  const total = totalOf(db, key)
  const [, gone] = walk(db, key, w, total, -w.limit - 1)
  return Math.max(0, w.limit - (total - gone))
}

const { Allowed } = Admission_.Admission

/** Decodes {allowed, ms, remaining}: an allowed acquire's ms is when the quota is whole again (`resetAfter`). */
const admission = (reply: unknown): Either.Either<Admission_.Admission, string> =>
  Either.map(limiter.admission(reply), (decoded) =>
    decoded._tag === "Allowed" && Array.isArray(reply)
      ? Allowed({ remaining: decoded.remaining, resetAfter: Duration.millis(reply[1] as number) })
      : decoded)

/**
 * The window as a member of several limits decided as one (./limits.ts): its own acquire's condition and wait
 * (cost ≤ limit and cost fits in what the live entries leave; else until it does, -1 when cost > limit), and
 * a refund of the entry spent at `start` (the `t` its take wrote): its cost less the refund (never below 0;
 * the entry removed at 0, the list deleted when it holds no entry), while that entry lasts; an entry that
 * has expired has nothing to give back.
 */
limits.register<Window>({
  kind: KIND,
  letter: "S",
  lua: `${FUNCTIONS_AT_NOW}local function left(key, w)
  local total = total_of(key)
  local _, gone = walk(key, w, total, -w.limit - 1)
  return math.max(0, w.limit - (total - gone))
end
families['S'] = {
  parse = window,
  wait = function(key, w, cost)
    if cost > w.limit then return -1 end
    local _, _, at = walk(key, w, total_of(key), cost)
    if at then return ms(at) end
    return 0
  end,
  take = take,
  left = left,
  start = function(w) return stamp end,
  refund = function(key, w, cost, start)
    if start + w.size <= now then return end
    local i = redis.call('LLEN', key) - 1
    while i >= 1 do
      local t, c = entry(redis.call('LINDEX', key, i))
      if t < start then return end
      if t == start then
        local back = math.min(cost, c)
        if c > back then
          redis.call('LSET', key, i, string.format('%d', t) .. ' ' .. string.format('%d', c - back))
        else
          local newer = redis.call('LRANGE', key, i + 1, -1)
          redis.call('LTRIM', key, 0, i - 1)
          if #newer > 0 then redis.call('RPUSH', key, unpack(newer)) end
        end
        if redis.call('LLEN', key) == 1 then
          redis.call('DEL', key)
        else
          redis.call('LSET', key, 0, string.format('%d', total_of(key) - back))
        end
        return
      end
      i = i - 1
    end
  end
}
`,
  twin: {
    parse: windowOf,
    wait: (db, key, w, cost) => {
      if (cost > w.limit) return -1
      const [, , at] = walk(db, key, w, totalOf(db, key), cost)
      return at === undefined ? 0 : msTo(db, at)
    },
    take,
    left: leftTwin,
    start: () => stamp,
    refund: (db, key, w, cost, start) => {
      if (start + w.size <= db.now) return
      for (let i = db.llen(key) - 1; i >= 1; i--) {
        const [t, c] = entryOf(db.lindex(key, i)!)
        if (t < start) return
        if (t === start) {
          const back = Math.min(cost, c)
          if (c > back) {
            db.lset(key, i, `${t} ${c - back}`)
          } else {
            const newer = db.lrange(key, i + 1, -1)
            db.ltrim(key, 0, i - 1)
            if (newer.length > 0) db.rpush(key, ...newer)
          }
          if (db.llen(key) === 1) db.del(key)
          else db.lset(key, 0, String(totalOf(db, key) - back))
          return
        }
      }
    }
  }
})

/**
 * @internal Counts `cost` if the entries of the last window (the live ones) leave room for it; a denial writes
 * nothing. KEYS[1] the name's list; ARGV[1] "<limit> <window µs>", ARGV[2] the cost (whole units). Returns
 * {1, ms, remaining} if allowed (ms: until the quota is whole again, 0 when nothing is counted), {0, ms,
 * remaining} if denied (ms: until the cost fits, rounded up; -1 when cost > limit: never). Calls made
 * together are batched: its `many` variant runs many acquires of one window at one server time, each
 * protected (KEYS the lists, ARGV[1] the window's parameters, once, then each call's cost), and replies, per
 * call, the same three values, or an error reply.
 */
export const ACQUIRE = define({
  name: "SlidingWindow.acquire",
  keys: 1,
  lua: `${FUNCTIONS}return {take(KEYS[1], window(ARGV[1]), tonumber(ARGV[2]))}
`,
  twin: acquireTwin,
  decode: admission,
  many: {
    lua: `${FUNCTIONS}local function call(key, params, cost) return {take(key, window(params), tonumber(cost))} end
${manyLua("call", 1, 1, 1)}`,
    twin: manyTwin(acquireTwin, 1, 1, 1),
    shared: 1
  }
})

/**
 * @internal What is left now, without counting: the limit less the live entries' cost. KEYS[1] the list;
 * ARGV[1] "<limit> <window µs>".
 */
export const PEEK = define({
  name: "SlidingWindow.peek",
  keys: 1,
  readOnly: true,
  lua: `${FUNCTIONS}local w = window(ARGV[1])
local total = total_of(KEYS[1])
local _, gone = walk(KEYS[1], w, total, -w.limit - 1)
return math.max(0, w.limit - (total - gone))
`,
  twin: (db, keys, argv) => leftTwin(db, keys[0]!, windowOf(argv[0]!)),
  decode: limiter.count
})

class WindowImpl<Name extends Redis.KeyName> extends limiter.Limiter<Name, SlidingWindow.Entity>
  implements SlidingWindow.SlidingWindow<Name>
{
  readonly [TypeId]: SlidingWindow.TypeId = TypeId
  constructor(namespace: string, readonly limit: number, readonly window: Duration.Duration, micros: bigint) {
    // The scripts take the window as "<limit> <window µs>".
    super(KIND, entity, namespace, `${limit} ${micros}`, { acquire: ACQUIRE, peek: PEEK }, {
      quota: limit,
      window,
      // An allowed admission says when the quota is whole again; one made otherwise reads as whole now.
      resetAfter: (allowed) => allowed.resetAfter ?? Duration.zero
    })
    Object.freeze(this)
  }

  override toString() {
    return `${this.label}: ${this.limit} per ${Duration.format(this.window)}, sliding`
  }
}

/** @internal */
export const make = <Name extends Redis.KeyName>(
  namespace: string,
  limit: number,
  window: Duration.DurationInput
): SlidingWindow.SlidingWindow<Name> => {
  key.validateNamespace(KIND, namespace)
  if (!isCount(limit, 0) || limit > MAX_LIMIT) {
    throw new RangeError(
      `wakuwaku: SlidingWindow(${namespace}) limit must be a whole number from 0 to ${MAX_LIMIT} (a name holds ` +
        `an entry per unit; a TokenBucket or a FixedWindow has no such bound), got ${String(limit)}`
    )
  }
  const decoded = Duration.decodeUnknown(window)
  const nanos = decoded._tag === "Some" ? Duration.toNanos(decoded.value) : undefined
  if (
    nanos === undefined || nanos._tag === "None" || nanos.value % 1000n !== 0n || nanos.value < 1000n ||
    nanos.value / 1000n > MAX_MICROS
  ) {
    throw new RangeError(
      `wakuwaku: SlidingWindow(${namespace}) window must be a whole number of microseconds from 1 µs to ` +
        `${MAX_TEXT}, got ${decoded._tag === "Some" ? Duration.format(decoded.value) : String(window)}`
    )
  }
  return new WindowImpl<Name>(namespace, limit, Duration.nanos(nanos.value), nanos.value / 1000n)
}

/** The command line's `--algorithm sliding-window`: the same `--limit` and `--window` as a fixed window's. */
limiter.registerAlgorithm<{ readonly limit: number; readonly window: Duration.Duration }>({
  name: "sliding-window",
  title: "sliding window",
  example: "--limit 5 --window 10s",
  flags: {
    limit: { ...limiter.values.count, value: "N", env: "WAKUWAKU_LIMIT", default: "20", help: "requests per window" },
    window: { ...limiter.values.duration, value: "DURATION", env: "WAKUWAKU_WINDOW", default: "1m", help: "the window" }
  },
  make: (namespace, { limit, window }) => make<string>(namespace, limit, window),
  summary: ({ limit, window }) => `${limit} per any ${Duration.format(window)}`,
  burst: ({ limit }) => limit
})
