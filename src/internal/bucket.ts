/**
 * @internal The token bucket's arithmetic on the server's clock: the Lua functions and their twin, shared by
 * TokenBucket's scripts (./tokenBucket.ts, and its family in ./limits.ts) and by RateLimiterStore's
 * (./rateLimiterStore.ts), so that every bucket refills, expires and decides by one definition.
 */
import type * as Script from "../Script.js"
import { NOW_US } from "./lua.js"
import { parsedOnce, ReplyError } from "./script.js"

/**
 * @internal Lua shared by the scripts, after {@link NOW_US}, which sets `now` (the group scripts of
 * ./limits.ts read `now` once and run these in a block of their own). A bucket's parameters travel
 * as one ARGV string, its shape: "<capacity> <tokens per period> <period µs>", parsed once per script
 * call (`shape`). State is one
 * string "<tokens> <ts>": tokens fractional and negative while the bucket is in debt (printed with
 * %.17g, so a round trip is exact), ts the server time in µs. An absent key is a full bucket.
 * - `level(key, b)` is the level at `now`. Refill multiplies before it divides, and every time the
 *   scripts reply is checked with that same expression, so a call exactly then sees what was promised.
 * - `store(key, b, tokens)` writes the level at `now`, expiring when the bucket is full again (deleting
 *   it when full now).
 * - `retry(b, tokens, cost, max_wait, allowance)` is the wait (ms) of a denied reservation, until a call with the
 *   same max_wait would be allowed.
 * - `take(key, b, cost, max_wait)` is one reservation: it takes `cost` if the tokens left would be at
 *   least -(rate × max_wait ms), the debt allowed (`allowance`). It returns four values: allowed
 *   (0|1), ms (allowed: the wait until the debt is paid, at most max_wait; denied: when a call with the
 *   same max_wait would be allowed, -1 when cost > capacity), floor(tokens left), and the tokens left
 *   as stored (a reservation's place in the queue: see CANCEL). An acquire is a take with max_wait 0.
 */
export const FUNCTIONS_AT_NOW = `local at = ' ' .. string.format('%d', now)
local shapes = {}
local function shape(s)
  local b = shapes[s]
  if b then return b end
  local capacity, k, period = string.match(s, '^(%d+) (%d+) (%d+)$')
  b = {capacity = tonumber(capacity), k = tonumber(k), period = tonumber(period)}
  shapes[s] = b
  return b
end
local function level(key, b)
  local state = redis.call('GET', key)
  if not state then return b.capacity end
  local sp = string.find(state, ' ', 1, true)
  local elapsed = now - tonumber(string.sub(state, sp + 1))
  if elapsed < 0 then elapsed = 0 end
  local tokens = tonumber(string.sub(state, 1, sp - 1)) + elapsed * b.k / b.period
  if tokens > b.capacity then return b.capacity end
  return tokens
end
local function store(key, b, tokens)
  if tokens >= b.capacity then
    redis.call('DEL', key)
  else
    local ttl = math.ceil((b.capacity - tokens) * b.period / b.k / 1000)
    if ttl < 1 then ttl = 1 end
    redis.call('SET', key, string.format('%.17g', tokens) .. at, 'PX', string.format('%d', ttl))
  end
end
local function retry(b, tokens, cost, max_wait, allowance)
  local ms = math.ceil(((cost - tokens) * b.period / b.k - max_wait * 1000) / 1000)
  for _ = 1, 3 do
    if (tokens + (ms * 1000) * b.k / b.period - cost) + allowance >= 0 then break end
    ms = ms + 1
  end
  return ms
end
local function take(key, b, cost, max_wait)
  local capacity, k, period = b.capacity, b.k, b.period
  local tokens = level(key, b)
  local allowance = 0
  if max_wait > 0 then allowance = (max_wait * 1000) * k / period end
  local allowed, ms = 0, 0
  if cost > capacity then
    ms = -1
  elseif (tokens - cost) + allowance >= 0 then
    tokens = tokens - cost
    allowed = 1
    if tokens < 0 then
      ms = math.ceil(-tokens * period / k / 1000)
      for _ = 1, 3 do
        if tokens + (ms * 1000) * k / period >= 0 then break end
        ms = ms + 1
      end
      if ms > max_wait then ms = max_wait end
    end
  else
    ms = retry(b, tokens, cost, max_wait, allowance)
  end
  store(key, b, tokens)
  return allowed, ms, math.floor(tokens), tokens
end
`
export const FUNCTIONS = `${NOW_US}${FUNCTIONS_AT_NOW}`

/** The twin of FUNCTIONS (memory.ts): the same arithmetic, in the same order, on the same doubles. */
export interface Shape {
  readonly capacity: number
  readonly k: number
  readonly period: number
}
export const shapeOf = parsedOnce((s: string): Shape => {
  const m = /^(\d+) (\d+) (\d+)$/.exec(s)
  if (m === null) throw new ReplyError(`ERR bad bucket shape ${JSON.stringify(s)}`)
  return { capacity: Number(m[1]), k: Number(m[2]), period: Number(m[3]) }
})
/**
 * The states last written, with their two numbers: a bucket's next call reads its state back (a group's
 * call twice: to decide, then to take), and parsing the numbers of the text is most of a level's cost
 * (docs/performance.md, "Figures behind design choices"). A state is found by its text, which is all its
 * numbers are made of.
 */
const STATES = 8
const states: Array<string | undefined> = new Array<string | undefined>(STATES).fill(undefined)
const stateTokens = new Float64Array(STATES)
const stateAt = new Float64Array(STATES)
let nextState = 0

export const levelOf = (db: Script.Keyspace, key: string, b: Shape): number => {
  const state = db.get(key)
  if (state === null) return b.capacity
  let i = 0
  while (i < STATES && states[i] !== state) i++
  let tokens: number
  let at: number
  if (i < STATES) {
    tokens = stateTokens[i]!
    at = stateAt[i]!
  } else {
    const sp = state.indexOf(" ")
    tokens = Number(state.slice(0, sp))
    at = Number(state.slice(sp + 1))
  }
  let elapsed = db.now - at
  if (elapsed < 0) elapsed = 0
  tokens = tokens + elapsed * b.k / b.period
  return tokens > b.capacity ? b.capacity : tokens
}
export const store = (db: Script.Keyspace, key: string, b: Shape, tokens: number): void => {
  if (tokens >= b.capacity) {
    db.del(key)
  } else {
    let ttl = Math.ceil((b.capacity - tokens) * b.period / b.k / 1000)
    if (ttl < 1) ttl = 1
    // String() round-trips a double exactly, as %.17g does in the Lua.
    const state = `${String(tokens)} ${db.now}`
    db.set(key, state, { px: ttl })
    states[nextState] = state
    stateTokens[nextState] = tokens
    stateAt[nextState] = db.now
    nextState = (nextState + 1) % STATES
  }
}
export const retry = (b: Shape, tokens: number, cost: number, maxWait: number, allowance: number): number => {
  let ms = Math.ceil(((cost - tokens) * b.period / b.k - maxWait * 1000) / 1000)
  for (let i = 0; i < 3; i++) {
    if ((tokens + (ms * 1000) * b.k / b.period - cost) + allowance >= 0) break
    ms = ms + 1
  }
  return ms
}
export const take = (
  db: Script.Keyspace,
  key: string,
  b: Shape,
  cost: number,
  maxWait: number
): [allowed: number, ms: number, left: number, tokens: number] => {
  const { capacity, k, period } = b
  let tokens = levelOf(db, key, b)
  let allowance = 0
  if (maxWait > 0) allowance = (maxWait * 1000) * k / period
  let allowed = 0
  let ms = 0
  if (cost > capacity) {
    ms = -1
  } else if ((tokens - cost) + allowance >= 0) {
    tokens = tokens - cost
    allowed = 1
    if (tokens < 0) {
      ms = Math.ceil(-tokens * period / k / 1000)
      for (let i = 0; i < 3; i++) {
        if (tokens + (ms * 1000) * k / period >= 0) break
        ms = ms + 1
      }
      if (ms > maxWait) ms = maxWait
    }
  } else {
    ms = retry(b, tokens, cost, maxWait, allowance)
  }
  store(db, key, b, tokens)
  // Lua hands Redis its numbers as integers, truncated: -0 becomes 0.
  return [allowed, ms + 0, Math.floor(tokens), tokens]
}
