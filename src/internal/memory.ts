/**
 * @internal The embedded backend: the `Redis` service over a store in this process.
 *
 * - The store's keyspace (memory/keyspace.ts) is Redis's commands with Redis's rules; plain commands
 *   (memory/commands.ts) and scripts' twins (each `Script`'s `twin`) run on it.
 * - Time is Effect's `Clock`, read once per call: `TIME` and expiry both use it.
 * - Each call runs synchronously, so nothing interleaves with it: a twin is as atomic as its script.
 * - BLMOVE waits on Effect primitives: the move itself happens only in a synchronous step of the
 *   waiting fiber, so an interrupted wait has moved nothing.
 */
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import type * as Fiber from "effect/Fiber"
import type * as FiberStatus from "effect/FiberStatus"
import * as Layer from "effect/Layer"
import type * as Scope from "effect/Scope"
import * as Capability from "../Capability.js"
import type * as Redis from "../Redis.js"
import type * as Script from "../Script.js"
import { command, side, upper } from "./memory/commands.js"
import { Db } from "./memory/keyspace.js"
import { checkKeys, decodedReply, ReplyError, scriptEntry, type ScriptOn } from "./script.js"
import * as core from "./service.js"
import * as telemetry from "./telemetry.js"
import { notCount } from "./validate.js"

class StoreImpl implements Redis.MemoryStore {
  readonly [core.MemoryStoreTypeId]: Redis.MemoryStoreTypeId = core.MemoryStoreTypeId
  readonly db = new Db()
  /** Open dedicated connections by id: whether each is closed, and how to wake its blocked BLMOVE. */
  readonly connections = new Map<number, Connection>()
  nextId = 1
  get size() {
    return this.db.entries.size
  }
}

/** @internal */
export const makeStore = (maxKeys?: number): Redis.MemoryStore => {
  const store = new StoreImpl()
  store.db.maxKeys = validMaxKeys(maxKeys)
  return store
}

const validMaxKeys = (maxKeys: number | undefined): number => {
  if (maxKeys === undefined) return Infinity
  const problem = notCount("wakuwaku: memory store maxKeys", maxKeys, 1)
  if (problem !== undefined) throw new RangeError(problem)
  return maxKeys
}

const failure = (reason: Redis.RedisErrorReason, operation: string, message: string) =>
  new core.RedisError({ reason, operation, cause: new ReplyError(message) })

const closedError = (operation: string) => failure("Connection", operation, "Connection is closed.")

/** Runs one plain command on the store; CLIENT KILL ID ends a dedicated connection. */
const runCommand = (store: StoreImpl, name: string, args: ReadonlyArray<string | number>) =>
  command(store.db, name, args, (id) => {
    const connection = store.connections.get(id)
    if (connection === undefined) return 0
    close(store, id, connection)
    return 1
  })

/** Runs `f` at the current time of the fiber's Clock, synchronously. */
const atNow = <A>(store: StoreImpl, operation: string, reason: Redis.RedisErrorReason, f: () => A) =>
  Effect.flatMap(Clock.currentTimeNanos, (nanos) => {
    store.db.at(nanos)
    try {
      return Effect.succeed(f())
    } catch (cause) {
      return Effect.fail(new core.RedisError({ reason, operation, cause }))
    }
  })

/** The dedicated connection's BLMOVE: moves at once if it can, else waits for a push, the timeout or a kill. */
const blmove = (connection: Connection, store: StoreImpl, args: ReadonlyArray<string | number>) =>
  Effect.gen(function*() {
    const s = args.map(String)
    if (s.length !== 5) {
      return yield* Effect.fail(failure("Server", "BLMOVE", "ERR wrong number of arguments for 'blmove' command"))
    }
    const [source, destination] = [s[0]!, s[1]!]
    const seconds = Number(s[4])
    if (!(seconds >= 0)) {
      return yield* Effect.fail(failure("Server", "BLMOVE", "ERR timeout is not a float or out of range"))
    }
    const started = yield* Clock.currentTimeMillis
    while (true) {
      if (connection.closed) return yield* Effect.fail(closedError("BLMOVE"))
      const moved = yield* atNow(
        store,
        "BLMOVE",
        "Server",
        () => store.db.lmove(source, destination, side(s[2]!), side(s[3]!))
      )
      if (moved !== null) return moved
      const left = seconds === 0 ? Infinity : started + seconds * 1000 - (yield* Clock.currentTimeMillis)
      if (left <= 0) return null
      // Woken by a push on the source or a kill; nothing moves while waiting, so interrupting it loses nothing.
      const woken = Effect.async<void>((resume) => {
        const wake = () => resume(Effect.void)
        let waiting = store.db.waiters.get(source)
        if (waiting === undefined) store.db.waiters.set(source, waiting = new Set())
        waiting.add(wake)
        connection.wake = wake
        // A push or a kill between the attempt above and this registration would find no waiter: look again.
        if (connection.closed || store.db.entries.has(source)) wake()
        return Effect.sync(() => {
          store.db.waiters.get(source)?.delete(wake)
          if (connection.wake === wake) connection.wake = undefined
        })
      })
      yield* left === Infinity ? woken : Effect.timeoutOption(woken, Duration.millis(left))
    }
  })

const dedicated = (store: StoreImpl): Effect.Effect<Redis.Dedicated, never, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.sync(() => {
      const id = store.nextId++
      const connection: Connection = { closed: false, wake: undefined }
      store.connections.set(id, connection)
      return { id, connection }
    }),
    ({ connection, id }) => Effect.sync(() => close(store, id, connection))
  ).pipe(Effect.map(({ connection, id }): Redis.Dedicated => ({
    id,
    command: (name, args) =>
      connection.closed
        ? Effect.fail(closedError(name))
        : upper(name) === "BLMOVE"
        ? blmove(connection, store, args)
        : atNow(store, name, "Server", () => runCommand(store, name, args)),
    close: Effect.sync(() => close(store, id, connection)),
    kill: Effect.sync(() => close(store, id, connection))
  })))

/** A dedicated connection of the memory backend. */
interface Connection {
  closed: boolean
  /** Wakes its blocked BLMOVE, if any. */
  wake: (() => void) | undefined
}

/** Closes a dedicated connection: it is forgotten, and a BLMOVE it has blocked fails at once. */
const close = (store: StoreImpl, id: number, connection: Connection) => {
  connection.closed = true
  store.connections.delete(id)
  connection.wake?.()
}

const MEMORY: telemetry.Server = { system: telemetry.SYSTEM.memory }

/** @internal The service over a store. */
export const make = (store: Redis.MemoryStore): Redis.Service => {
  const impl = store as StoreImpl
  /**
   * A script, run on the fiber that calls it: the twin at the time of the fiber's Clock, synchronously, its
   * reply decoded into the Exit the fiber goes on with. No step of the fiber beyond the caller's own.
   */
  const scriptOn = <A>(
    fiber: Fiber.RuntimeFiber<unknown, unknown>,
    _: FiberStatus.Running,
    script: Script.Script<A>,
    keys: ReadonlyArray<string>,
    args: ReadonlyArray<string>
  ): Effect.Effect<A, Redis.RedisError> =>
    telemetry.storeSync(fiber, MEMORY, "EVALSHA", script.name, () => runScript(fiber, script, keys, args))
  const runScript = <A>(
    fiber: Fiber.RuntimeFiber<unknown, unknown>,
    script: Script.Script<A>,
    keys: ReadonlyArray<string>,
    args: ReadonlyArray<string>
  ): Effect.Effect<A, Redis.RedisError> => {
    const wrong = checkKeys(script, keys)
    if (wrong !== undefined) return Effect.dieMessage(wrong)
    const run = script.twin
    if (run === undefined) {
      return Exit.fail(
        failure("Script", `script ${script.name}`, `NOSCRIPT the memory backend has no twin of script ${script.name}`)
      )
    }
    impl.db.at(Context.get(fiber.currentDefaultServices, Clock.Clock).unsafeCurrentTimeNanos())
    let reply: Script.Reply
    try {
      reply = run(impl.db, keys, args)
    } catch (cause) {
      return Exit.fail(
        new core.RedisError({
          reason: "Script",
          operation: `script ${script.name}`,
          cause: scriptCause(script, cause)
        })
      )
    }
    return decodedReply(script, reply)
  }
  const service: Redis.Service & ScriptOn = {
    [core.TypeId]: core.TypeId,
    ...scriptEntry(scriptOn),
    command: (name, args) => atNow(impl, name, "Server", () => runCommand(impl, name, args)),
    dedicated: () => dedicated(impl)
  }
  return service
}

/** An error raised inside a twin reads as Redis words one raised inside a script. */
const scriptCause = (script: Script.Script<unknown>, cause: unknown) =>
  new ReplyError(
    `${
      cause instanceof Error ? cause.message : String(cause)
    } script: ${script.sha1}, on @user_script (memory twin of ${script.name})`
  )

/** How many keys one step of the periodic sweep looks at. */
const SWEEP_CHUNK = 1000

/**
 * One periodic sweep: looks at as many keys as the store holds, where the sweep's round left off, in
 * steps of {@link SWEEP_CHUNK} keys, each at the time of the Clock. Between steps it sleeps for zero on
 * the Clock: on the live clock a timer, so the event loop (I/O, other calls) runs between steps, which a
 * fiber's `yieldNow` (a microtask) would not let it do.
 */
const sweepRound = (store: StoreImpl) =>
  Effect.gen(function*() {
    let left = store.db.entries.size
    while (left > 0) {
      const step = Math.min(left, SWEEP_CHUNK)
      const seen = yield* atNow(store, "sweep", "Server", () => store.db.sweep(step))
      left -= seen
      if (seen < step || left === 0) return
      yield* Effect.sleep(Duration.zero)
    }
  })

/** @internal */
export const layer = <Access extends "ReadWrite" | "ReadOnly">(
  options: Redis.MemoryOptions | undefined,
  access: Access
): Layer.Layer<Access extends "ReadWrite" ? Redis.ReadWrite : Redis.ReadOnly> => {
  const every = Duration.decode(options?.sweepInterval ?? "1 second")
  if (!Duration.isFinite(every) || Duration.toMillis(every) <= 0) {
    throw new RangeError(
      `wakuwaku: Redis.layerMemory sweepInterval must be a positive finite duration, got ${Duration.format(every)}`
    )
  }
  validMaxKeys(options?.maxKeys)
  const service = Layer.scoped(
    core.Redis,
    Effect.gen(function*() {
      const store = (options?.store ?? makeStore(options?.maxKeys)) as StoreImpl
      if (!(store instanceof StoreImpl)) {
        return yield* Effect.dieMessage("wakuwaku: Redis.layerMemory store must be made by Redis.makeMemoryStore")
      }
      // The sweep frees the memory of expired keys; reads never see them anyway.
      yield* Effect.forkScoped(Effect.forever(Effect.zipRight(Effect.sleep(every), sweepRound(store))))
      return make(store)
    })
  )
  return Layer.merge(service, access === "ReadWrite" ? Capability.ReadWrite : Capability.ReadOnly) as Layer.Layer<
    never
  > as Layer.Layer<Access extends "ReadWrite" ? Redis.ReadWrite : Redis.ReadOnly>
}
