import { Context, Effect, Option } from "effect"
import type { Scope } from "effect"
import { describe, expectTypeOf, it } from "vitest"
import { Capability, Lock, Redis, Semaphore } from "wakuwaku"

const EXPORTS = Semaphore.make<string>("export", 5, "1 minute")
const ROWS = Semaphore.make<number>("row", 2, "1 second")

declare const permit: Semaphore.Permit

/** A service the protected effect needs. */
class Db extends Context.Tag("Db")<Db, { readonly save: (fence: bigint) => Effect.Effect<void> }>() {}
class Boom {
  readonly _tag = "Boom"
}

type Needs = Redis.Redis | Capability.Write<Capability.Entity<"Semaphore">>
type Failure = Lock.LeaseUnavailable | Redis.RedisError | Redis.InvalidInput

const needs = <A, E, R>(_: Effect.Effect<A, E, R>) => expectTypeOf<R>()

/** Every operation, as a program to run. */
const programs = {
  tryAcquire: EXPORTS.tryAcquire("a"),
  tryAcquireMany: EXPORTS.tryAcquire("a", 3),
  release: EXPORTS.release(permit),
  extend: EXPORTS.extend(permit),
  withPermits: Semaphore.withPermits(EXPORTS, "a", 2)(Effect.void),
  withPermitsDataFirst: Semaphore.withPermits(Effect.void, EXPORTS, "a", 2),
  scoped: Effect.scoped(Semaphore.scoped(EXPORTS, "a", 1))
}

describe("Semaphore requirements", () => {
  it("Requirements is Redis | Write of its own entity, whose kind is a literal", () => {
    expectTypeOf<Semaphore.Requirements>().toEqualTypeOf<Needs>()
    expectTypeOf<Semaphore.Entity>().toEqualTypeOf<Capability.Entity<"Semaphore">>()
    expectTypeOf(Semaphore.entity).toEqualTypeOf<Semaphore.Entity>()
    expectTypeOf<Semaphore.Entity["kind"]>().toEqualTypeOf<"Semaphore">()
  })

  it("every operation needs exactly Redis | Write<Entity<\"Semaphore\">>", () => {
    needs(programs.tryAcquire).toEqualTypeOf<Needs>()
    needs(programs.tryAcquireMany).toEqualTypeOf<Needs>()
    needs(programs.release).toEqualTypeOf<Needs>()
    needs(programs.extend).toEqualTypeOf<Needs>()
    needs(programs.withPermits).toEqualTypeOf<Needs>()
    needs(programs.withPermitsDataFirst).toEqualTypeOf<Needs>()
    needs(programs.scoped).toEqualTypeOf<Needs>()
    needs(Semaphore.scoped(EXPORTS, "a", 1)).toEqualTypeOf<Needs | Scope.Scope>()
  })

  it("withPermits adds what the protected effect needs, and nothing else", () => {
    const body = Effect.flatMap(Db, (db) => db.save(1n))
    needs(Semaphore.withPermits(EXPORTS, "a", 1)(body)).toEqualTypeOf<Needs | Db>()
    needs(Semaphore.withPermits(body, EXPORTS, "a", 1)).toEqualTypeOf<Needs | Db>()
    needs(Semaphore.withPermits(EXPORTS, "a", 1)(body).pipe(Effect.provide(Redis.layer()))).toEqualTypeOf<Db>()
    // A body that takes a lock needs both capabilities.
    const JOBS = Lock.make<string>("job", "1 second")
    needs(Semaphore.withPermits(EXPORTS, "a", 1)(JOBS.tryLock("b"))).toEqualTypeOf<
      Needs | Redis.Redis | Capability.Write<Lock.Entity>
    >()
  })
})

describe("with only the read-only capability, nothing is acquired", () => {
  it("each operation leaves Write<Entity<\"Semaphore\">> and does not run", () => {
    const tryAcquire = programs.tryAcquire.pipe(Effect.provide(Redis.layerReadOnly()))
    needs(tryAcquire).toEqualTypeOf<Capability.Write<Semaphore.Entity>>()
    // @ts-expect-error Write<Entity<"Semaphore">> is missing
    Effect.runPromise(tryAcquire)

    const release = programs.release.pipe(Effect.provide(Redis.layerReadOnly()))
    needs(release).toEqualTypeOf<Capability.Write<Semaphore.Entity>>()
    // @ts-expect-error Write<Entity<"Semaphore">> is missing
    Effect.runPromise(release)

    const extend = programs.extend.pipe(Effect.provide(Redis.layerReadOnly()))
    needs(extend).toEqualTypeOf<Capability.Write<Semaphore.Entity>>()
    // @ts-expect-error Write<Entity<"Semaphore">> is missing
    Effect.runPromise(extend)

    const withPermits = programs.withPermits.pipe(Effect.provide(Redis.layerReadOnly()))
    needs(withPermits).toEqualTypeOf<Capability.Write<Semaphore.Entity>>()
    // @ts-expect-error Write<Entity<"Semaphore">> is missing
    Effect.runPromise(withPermits)

    const scoped = programs.scoped.pipe(Effect.provide(Redis.layerReadOnly()))
    needs(scoped).toEqualTypeOf<Capability.Write<Semaphore.Entity>>()
    // @ts-expect-error Write<Entity<"Semaphore">> is missing
    Effect.runPromise(scoped)
  })

  it("a grant of locks is not a grant of semaphores, and the reverse", () => {
    const locksOnly = programs.withPermits.pipe(
      Effect.provide(Capability.layer({ write: [Lock.entity] })),
      Effect.provide(Redis.layerReadOnly())
    )
    needs(locksOnly).toEqualTypeOf<Capability.Write<Semaphore.Entity>>()
    // @ts-expect-error Write<Entity<"Semaphore">> is missing
    Effect.runPromise(locksOnly)
    expectTypeOf<Capability.Write<Semaphore.Entity>>().not.toMatchTypeOf<Capability.Write<Lock.Entity>>()
    expectTypeOf<Capability.Write<Lock.Entity>>().not.toMatchTypeOf<Capability.Write<Semaphore.Entity>>()
  })
})

/** Provides the read-write layer; R stays generic, so the caller sees the exact leftover. */
const viaReadWrite = <A, E, R>(program: Effect.Effect<A, E, R>) => program.pipe(Effect.provide(Redis.layer()))

describe("with read-write, or a grant of semaphores, everything compiles", () => {
  it("read-write", () => {
    needs(viaReadWrite(programs.tryAcquire)).toEqualTypeOf<never>()
    needs(viaReadWrite(programs.tryAcquireMany)).toEqualTypeOf<never>()
    needs(viaReadWrite(programs.release)).toEqualTypeOf<never>()
    needs(viaReadWrite(programs.extend)).toEqualTypeOf<never>()
    needs(viaReadWrite(programs.withPermits)).toEqualTypeOf<never>()
    needs(viaReadWrite(programs.withPermitsDataFirst)).toEqualTypeOf<never>()
    needs(viaReadWrite(programs.scoped)).toEqualTypeOf<never>()
    Effect.runPromise(programs.withPermits.pipe(Effect.provide(Redis.layer())))
  })

  it("Capability.layer({ write: [Semaphore.entity] })", () => {
    const only = programs.tryAcquire.pipe(
      Effect.provide(Capability.layer({ write: [Semaphore.entity] })),
      Effect.provide(Redis.layerReadOnly())
    )
    needs(only).toEqualTypeOf<never>()
    Effect.runPromise(only)
  })
})

describe("results and error channels are exact", () => {
  it("the operations", () => {
    expectTypeOf(EXPORTS.tryAcquire("a", 2)).toEqualTypeOf<
      Effect.Effect<Option.Option<Semaphore.Permit>, Redis.RedisError | Redis.InvalidInput, Needs>
    >()
    expectTypeOf(EXPORTS.release(permit)).toEqualTypeOf<Effect.Effect<boolean, Redis.RedisError, Needs>>()
    expectTypeOf(EXPORTS.extend(permit)).toEqualTypeOf<Effect.Effect<boolean, Redis.RedisError, Needs>>()
    expectTypeOf(permit.fence).toEqualTypeOf<bigint>()
    expectTypeOf(permit.permits).toEqualTypeOf<number>()
    expectTypeOf(EXPORTS.permits).toEqualTypeOf<number>()
    // A permit releases and extends itself, as Lock's and RwLock's tokens do: one generic token.
    expectTypeOf(permit.release).toEqualTypeOf<Effect.Effect<boolean, Redis.RedisError, Needs>>()
    expectTypeOf(permit.extend).toEqualTypeOf<Effect.Effect<boolean, Redis.RedisError, Needs>>()
    expectTypeOf<Semaphore.Permit>().toMatchTypeOf<Lock.Token<Semaphore.Requirements>>()
    expectTypeOf(Semaphore.withPermits(EXPORTS, "a", 1)(Effect.fail(new Boom()).pipe(Effect.as(42)))).toEqualTypeOf<
      Effect.Effect<number, Boom | Lock.LeaseLost | Failure, Needs>
    >()
    expectTypeOf(Semaphore.scoped(EXPORTS, "a", 1)).toEqualTypeOf<
      Effect.Effect<
        { readonly permit: Semaphore.Permit; readonly lost: Effect.Effect<never, Lock.LeaseLost> },
        Failure,
        Needs | Scope.Scope
      >
    >()
  })

  it("names and options are typed", () => {
    // @ts-expect-error a string semaphore takes string names
    EXPORTS.tryAcquire(5)
    // @ts-expect-error a number semaphore takes number names
    ROWS.tryAcquire("a")
    // @ts-expect-error a number semaphore takes number names
    Semaphore.withPermits(ROWS, "a", 1)
    // @ts-expect-error n is a number
    EXPORTS.tryAcquire("a", "2")
    // @ts-expect-error n is required by the scoped forms
    Semaphore.withPermits(EXPORTS, "a")
    expectTypeOf(ROWS.tryAcquire).parameter(0).toEqualTypeOf<number>()
    Semaphore.withPermits(EXPORTS, "a", 1, { acquire: Lock.tryOnce })(Effect.void)
    Semaphore.withPermits(EXPORTS, "a", 2, { acquire: Lock.wait({ deadline: "5 seconds" }), renewEvery: "1 second" })(
      Effect.void
    )
    // @ts-expect-error not a policy
    Semaphore.withPermits(EXPORTS, "a", 1, { acquire: "wait" })(Effect.void)
  })
})
