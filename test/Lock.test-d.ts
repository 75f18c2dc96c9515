import { Context, Effect, Option } from "effect"
import type { Scope } from "effect"
import { describe, expectTypeOf, it } from "vitest"
import { Capability, Lock, Pipe, Redis, RwLock, Semaphore } from "wakuwaku"

const JOBS = Lock.make<string>("job", "30 seconds")
const DOCS = RwLock.make<string>("doc", "10 seconds")
const ROWS = Lock.make<number>("row", "1 second")
const PAGES = RwLock.make<number>("page", "1 second")

declare const lockToken: Lock.LockToken
declare const readToken: RwLock.ReadToken
declare const writeToken: RwLock.WriteToken

/** A service the protected effect needs. */
class Db extends Context.Tag("Db")<Db, { readonly save: (fence: bigint) => Effect.Effect<void> }>() {}
class Boom {
  readonly _tag = "Boom"
}

type LockNeeds = Redis.Redis | Capability.Write<Capability.Entity<"Lock">>
type RwLockNeeds = Redis.Redis | Capability.Write<Capability.Entity<"RwLock">>
type Failure = Lock.LockUnavailable | Redis.RedisError | Redis.InvalidInput

const needs = <A, E, R>(_: Effect.Effect<A, E, R>) => expectTypeOf<R>()

/** Every Lock operation, as a program to run. */
const lockPrograms = {
  tryLock: JOBS.tryLock("a"),
  release: lockToken.release,
  extend: lockToken.extend,
  withLock: Lock.withLock(JOBS, "a")(Effect.void),
  scoped: Effect.scoped(Lock.scoped(JOBS, "a"))
}

/** Every RwLock operation, as a program to run. */
const rwLockPrograms = {
  tryRead: DOCS.tryRead("a"),
  tryWrite: DOCS.tryWrite("a"),
  readRelease: readToken.release,
  readExtend: readToken.extend,
  writeRelease: writeToken.release,
  writeExtend: writeToken.extend,
  withRead: RwLock.withRead(DOCS, "a")(Effect.void),
  withWrite: RwLock.withWrite(DOCS, "a")(Effect.void),
  scopedRead: Effect.scoped(RwLock.scopedRead(DOCS, "a")),
  scopedWrite: Effect.scoped(RwLock.scopedWrite(DOCS, "a"))
}

describe("Lock and RwLock requirements", () => {
  it("the Requirements aliases are Redis | Write of the lock's own entity", () => {
    expectTypeOf<Lock.Requirements>().toEqualTypeOf<LockNeeds>()
    expectTypeOf<RwLock.Requirements>().toEqualTypeOf<RwLockNeeds>()
    expectTypeOf<Lock.Entity>().toEqualTypeOf<Capability.Entity<"Lock">>()
    expectTypeOf<RwLock.Entity>().toEqualTypeOf<Capability.Entity<"RwLock">>()
    expectTypeOf(Lock.entity).toEqualTypeOf<Lock.Entity>()
    expectTypeOf(RwLock.entity).toEqualTypeOf<RwLock.Entity>()
  })

  it("every Lock operation needs exactly Redis | Write<Entity<\"Lock\">>", () => {
    needs(lockPrograms.tryLock).toEqualTypeOf<LockNeeds>()
    needs(lockPrograms.release).toEqualTypeOf<LockNeeds>()
    needs(lockPrograms.extend).toEqualTypeOf<LockNeeds>()
    needs(lockPrograms.withLock).toEqualTypeOf<LockNeeds>()
    needs(lockPrograms.scoped).toEqualTypeOf<LockNeeds>()
    needs(Lock.scoped(JOBS, "a")).toEqualTypeOf<LockNeeds | Scope.Scope>()
  })

  it("every RwLock operation needs exactly Redis | Write<Entity<\"RwLock\">>, tryRead included", () => {
    needs(rwLockPrograms.tryRead).toEqualTypeOf<RwLockNeeds>()
    needs(rwLockPrograms.tryWrite).toEqualTypeOf<RwLockNeeds>()
    needs(rwLockPrograms.readRelease).toEqualTypeOf<RwLockNeeds>()
    needs(rwLockPrograms.readExtend).toEqualTypeOf<RwLockNeeds>()
    needs(rwLockPrograms.writeRelease).toEqualTypeOf<RwLockNeeds>()
    needs(rwLockPrograms.writeExtend).toEqualTypeOf<RwLockNeeds>()
    needs(rwLockPrograms.withRead).toEqualTypeOf<RwLockNeeds>()
    needs(rwLockPrograms.withWrite).toEqualTypeOf<RwLockNeeds>()
    needs(rwLockPrograms.scopedRead).toEqualTypeOf<RwLockNeeds>()
    needs(rwLockPrograms.scopedWrite).toEqualTypeOf<RwLockNeeds>()
    needs(RwLock.scopedRead(DOCS, "a")).toEqualTypeOf<RwLockNeeds | Scope.Scope>()
    needs(RwLock.scopedWrite(DOCS, "a")).toEqualTypeOf<RwLockNeeds | Scope.Scope>()
  })

  it("the scoped forms add what the protected effect needs, and nothing else", () => {
    const body = Effect.flatMap(Db, (db) => db.save(1n))
    needs(Lock.withLock(JOBS, "a")(body)).toEqualTypeOf<LockNeeds | Db>()
    needs(RwLock.withRead(DOCS, "a")(body)).toEqualTypeOf<RwLockNeeds | Db>()
    needs(RwLock.withWrite(DOCS, "a")(body)).toEqualTypeOf<RwLockNeeds | Db>()
    // Providing Redis leaves exactly the body's own requirement.
    needs(Lock.withLock(JOBS, "a")(body).pipe(Effect.provide(Redis.layer()))).toEqualTypeOf<Db>()
    needs(RwLock.withWrite(DOCS, "a")(body).pipe(Effect.provide(Redis.layer()))).toEqualTypeOf<Db>()
    // A body that uses the lock of another kind needs both capabilities.
    needs(Lock.withLock(JOBS, "a")(DOCS.tryRead("b"))).toEqualTypeOf<LockNeeds | RwLockNeeds>()
  })
})

describe("with only the read-only capability, nothing locks", () => {
  it("Lock: each operation leaves Write<Entity<\"Lock\">> and does not run", () => {
    const tryLock = lockPrograms.tryLock.pipe(Effect.provide(Redis.layerReadOnly()))
    needs(tryLock).toEqualTypeOf<Capability.Write<Lock.Entity>>()
    // @ts-expect-error Write<Entity<"Lock">> is missing
    Effect.runPromise(tryLock)

    const release = lockPrograms.release.pipe(Effect.provide(Redis.layerReadOnly()))
    needs(release).toEqualTypeOf<Capability.Write<Lock.Entity>>()
    // @ts-expect-error Write<Entity<"Lock">> is missing
    Effect.runPromise(release)

    const extend = lockPrograms.extend.pipe(Effect.provide(Redis.layerReadOnly()))
    needs(extend).toEqualTypeOf<Capability.Write<Lock.Entity>>()
    // @ts-expect-error Write<Entity<"Lock">> is missing
    Effect.runPromise(extend)

    const withLock = lockPrograms.withLock.pipe(Effect.provide(Redis.layerReadOnly()))
    needs(withLock).toEqualTypeOf<Capability.Write<Lock.Entity>>()
    // @ts-expect-error Write<Entity<"Lock">> is missing
    Effect.runPromise(withLock)

    const scoped = lockPrograms.scoped.pipe(Effect.provide(Redis.layerReadOnly()))
    needs(scoped).toEqualTypeOf<Capability.Write<Lock.Entity>>()
    // @ts-expect-error Write<Entity<"Lock">> is missing
    Effect.runPromise(scoped)
  })

  it("RwLock: each operation leaves Write<Entity<\"RwLock\">> and does not run", () => {
    const tryRead = rwLockPrograms.tryRead.pipe(Effect.provide(Redis.layerReadOnly()))
    needs(tryRead).toEqualTypeOf<Capability.Write<RwLock.Entity>>()
    // @ts-expect-error Write<Entity<"RwLock">> is missing
    Effect.runPromise(tryRead)

    const tryWrite = rwLockPrograms.tryWrite.pipe(Effect.provide(Redis.layerReadOnly()))
    needs(tryWrite).toEqualTypeOf<Capability.Write<RwLock.Entity>>()
    // @ts-expect-error Write<Entity<"RwLock">> is missing
    Effect.runPromise(tryWrite)

    const readRelease = rwLockPrograms.readRelease.pipe(Effect.provide(Redis.layerReadOnly()))
    needs(readRelease).toEqualTypeOf<Capability.Write<RwLock.Entity>>()
    // @ts-expect-error Write<Entity<"RwLock">> is missing
    Effect.runPromise(readRelease)

    const readExtend = rwLockPrograms.readExtend.pipe(Effect.provide(Redis.layerReadOnly()))
    needs(readExtend).toEqualTypeOf<Capability.Write<RwLock.Entity>>()
    // @ts-expect-error Write<Entity<"RwLock">> is missing
    Effect.runPromise(readExtend)

    const writeRelease = rwLockPrograms.writeRelease.pipe(Effect.provide(Redis.layerReadOnly()))
    needs(writeRelease).toEqualTypeOf<Capability.Write<RwLock.Entity>>()
    // @ts-expect-error Write<Entity<"RwLock">> is missing
    Effect.runPromise(writeRelease)

    const writeExtend = rwLockPrograms.writeExtend.pipe(Effect.provide(Redis.layerReadOnly()))
    needs(writeExtend).toEqualTypeOf<Capability.Write<RwLock.Entity>>()
    // @ts-expect-error Write<Entity<"RwLock">> is missing
    Effect.runPromise(writeExtend)

    const withRead = rwLockPrograms.withRead.pipe(Effect.provide(Redis.layerReadOnly()))
    needs(withRead).toEqualTypeOf<Capability.Write<RwLock.Entity>>()
    // @ts-expect-error Write<Entity<"RwLock">> is missing
    Effect.runPromise(withRead)

    const withWrite = rwLockPrograms.withWrite.pipe(Effect.provide(Redis.layerReadOnly()))
    needs(withWrite).toEqualTypeOf<Capability.Write<RwLock.Entity>>()
    // @ts-expect-error Write<Entity<"RwLock">> is missing
    Effect.runPromise(withWrite)

    const scopedRead = rwLockPrograms.scopedRead.pipe(Effect.provide(Redis.layerReadOnly()))
    needs(scopedRead).toEqualTypeOf<Capability.Write<RwLock.Entity>>()
    // @ts-expect-error Write<Entity<"RwLock">> is missing
    Effect.runPromise(scopedRead)

    const scopedWrite = rwLockPrograms.scopedWrite.pipe(Effect.provide(Redis.layerReadOnly()))
    needs(scopedWrite).toEqualTypeOf<Capability.Write<RwLock.Entity>>()
    // @ts-expect-error Write<Entity<"RwLock">> is missing
    Effect.runPromise(scopedWrite)
  })
})

/** Provides the read-write layer; R stays generic, so the caller sees the exact leftover. */
const viaReadWrite = <A, E, R>(program: Effect.Effect<A, E, R>) => program.pipe(Effect.provide(Redis.layer()))

describe("with read-write, everything compiles", () => {
  it("Lock", () => {
    needs(viaReadWrite(lockPrograms.tryLock)).toEqualTypeOf<never>()
    needs(viaReadWrite(lockPrograms.release)).toEqualTypeOf<never>()
    needs(viaReadWrite(lockPrograms.extend)).toEqualTypeOf<never>()
    needs(viaReadWrite(lockPrograms.withLock)).toEqualTypeOf<never>()
    needs(viaReadWrite(lockPrograms.scoped)).toEqualTypeOf<never>()
    const withLock = lockPrograms.withLock.pipe(Effect.provide(Redis.layer()))
    needs(withLock).toEqualTypeOf<never>()
    Effect.runPromise(withLock)
    Effect.runPromise(viaReadWrite(lockPrograms.tryLock))
    Effect.runPromise(viaReadWrite(lockPrograms.scoped))
  })

  it("RwLock", () => {
    needs(viaReadWrite(rwLockPrograms.tryRead)).toEqualTypeOf<never>()
    needs(viaReadWrite(rwLockPrograms.tryWrite)).toEqualTypeOf<never>()
    needs(viaReadWrite(rwLockPrograms.readRelease)).toEqualTypeOf<never>()
    needs(viaReadWrite(rwLockPrograms.readExtend)).toEqualTypeOf<never>()
    needs(viaReadWrite(rwLockPrograms.writeRelease)).toEqualTypeOf<never>()
    needs(viaReadWrite(rwLockPrograms.writeExtend)).toEqualTypeOf<never>()
    needs(viaReadWrite(rwLockPrograms.withRead)).toEqualTypeOf<never>()
    needs(viaReadWrite(rwLockPrograms.withWrite)).toEqualTypeOf<never>()
    needs(viaReadWrite(rwLockPrograms.scopedRead)).toEqualTypeOf<never>()
    needs(viaReadWrite(rwLockPrograms.scopedWrite)).toEqualTypeOf<never>()
    const withWrite = rwLockPrograms.withWrite.pipe(Effect.provide(Redis.layer()))
    needs(withWrite).toEqualTypeOf<never>()
    Effect.runPromise(withWrite)
    Effect.runPromise(viaReadWrite(rwLockPrograms.tryRead))
    Effect.runPromise(viaReadWrite(rwLockPrograms.scopedRead))
  })
})

describe("custom capabilities: each lock kind is its own entity", () => {
  const LocksOnly = Capability.layer({ write: [Lock.entity] })
  const RwLocksOnly = Capability.layer({ write: [RwLock.entity] })

  it("Capability.layer({ write: [Lock.entity] }) satisfies Lock", () => {
    const withLock = lockPrograms.withLock.pipe(Effect.provide(LocksOnly), Effect.provide(Redis.layerReadOnly()))
    needs(withLock).toEqualTypeOf<never>()
    Effect.runPromise(withLock)
    const tryLock = lockPrograms.tryLock.pipe(Effect.provide(LocksOnly), Effect.provide(Redis.layerReadOnly()))
    needs(tryLock).toEqualTypeOf<never>()
    const release = lockPrograms.release.pipe(Effect.provide(LocksOnly), Effect.provide(Redis.layerReadOnly()))
    needs(release).toEqualTypeOf<never>()
  })

  it("…but not RwLock", () => {
    const tryRead = rwLockPrograms.tryRead.pipe(Effect.provide(LocksOnly), Effect.provide(Redis.layerReadOnly()))
    needs(tryRead).toEqualTypeOf<Capability.Write<RwLock.Entity>>()
    // @ts-expect-error Write<Entity<"RwLock">> is missing
    Effect.runPromise(tryRead)

    const withWrite = rwLockPrograms.withWrite.pipe(Effect.provide(LocksOnly), Effect.provide(Redis.layerReadOnly()))
    needs(withWrite).toEqualTypeOf<Capability.Write<RwLock.Entity>>()
    // @ts-expect-error Write<Entity<"RwLock">> is missing
    Effect.runPromise(withWrite)
  })

  it("Capability.layer({ write: [RwLock.entity] }) satisfies RwLock but not Lock", () => {
    const withRead = rwLockPrograms.withRead.pipe(Effect.provide(RwLocksOnly), Effect.provide(Redis.layerReadOnly()))
    needs(withRead).toEqualTypeOf<never>()
    Effect.runPromise(withRead)

    const withLock = lockPrograms.withLock.pipe(Effect.provide(RwLocksOnly), Effect.provide(Redis.layerReadOnly()))
    needs(withLock).toEqualTypeOf<Capability.Write<Lock.Entity>>()
    // @ts-expect-error Write<Entity<"Lock">> is missing
    Effect.runPromise(withLock)
  })

  it("the entities are nominal: neither write grants the other", () => {
    expectTypeOf<Capability.Write<Lock.Entity>>().not.toMatchTypeOf<Capability.Write<RwLock.Entity>>()
    expectTypeOf<Capability.Write<RwLock.Entity>>().not.toMatchTypeOf<Capability.Write<Lock.Entity>>()
  })
})

describe("results and error channels are exact", () => {
  it("Lock", () => {
    expectTypeOf(JOBS.tryLock("a")).toEqualTypeOf<
      Effect.Effect<Option.Option<Lock.LockToken>, Redis.RedisError | Redis.InvalidInput, LockNeeds>
    >()
    expectTypeOf(lockToken.release).toEqualTypeOf<Effect.Effect<boolean, Redis.RedisError, LockNeeds>>()
    expectTypeOf(lockToken.extend).toEqualTypeOf<Effect.Effect<boolean, Redis.RedisError, LockNeeds>>()
    expectTypeOf(lockToken.fence).toEqualTypeOf<bigint>()
    expectTypeOf(Lock.withLock(JOBS, "a")(Effect.fail(new Boom()).pipe(Effect.as(42)))).toEqualTypeOf<
      Effect.Effect<number, Boom | Lock.LockLost | Failure, LockNeeds>
    >()
    expectTypeOf(Lock.withLock(JOBS, "a")(Effect.succeed("x"))).toEqualTypeOf<
      Effect.Effect<string, Lock.LockLost | Failure, LockNeeds>
    >()
    expectTypeOf(Lock.scoped(JOBS, "a")).toEqualTypeOf<
      Effect.Effect<
        { readonly token: Lock.LockToken; readonly lost: Effect.Effect<never, Lock.LockLost> },
        Failure,
        LockNeeds | Scope.Scope
      >
    >()
  })

  it("RwLock", () => {
    expectTypeOf(DOCS.tryRead("a")).toEqualTypeOf<
      Effect.Effect<Option.Option<RwLock.ReadToken>, Redis.RedisError | Redis.InvalidInput, RwLockNeeds>
    >()
    expectTypeOf(DOCS.tryWrite("a")).toEqualTypeOf<
      Effect.Effect<Option.Option<RwLock.WriteToken>, Redis.RedisError | Redis.InvalidInput, RwLockNeeds>
    >()
    expectTypeOf(readToken.release).toEqualTypeOf<Effect.Effect<boolean, Redis.RedisError, RwLockNeeds>>()
    expectTypeOf(readToken.extend).toEqualTypeOf<Effect.Effect<boolean, Redis.RedisError, RwLockNeeds>>()
    expectTypeOf(writeToken.release).toEqualTypeOf<Effect.Effect<boolean, Redis.RedisError, RwLockNeeds>>()
    expectTypeOf(writeToken.extend).toEqualTypeOf<Effect.Effect<boolean, Redis.RedisError, RwLockNeeds>>()
    expectTypeOf(writeToken.fence).toEqualTypeOf<bigint>()
    expectTypeOf<RwLock.ReadToken>().not.toHaveProperty("fence")
    expectTypeOf(RwLock.withRead(DOCS, "a")(Effect.fail(new Boom()).pipe(Effect.as(42)))).toEqualTypeOf<
      Effect.Effect<number, Boom | Lock.LockLost | Failure, RwLockNeeds>
    >()
    expectTypeOf(RwLock.withWrite(DOCS, "a")(Effect.fail(new Boom()).pipe(Effect.as(42)))).toEqualTypeOf<
      Effect.Effect<number, Boom | Lock.LockLost | Failure, RwLockNeeds>
    >()
    expectTypeOf(RwLock.scopedRead(DOCS, "a")).toEqualTypeOf<
      Effect.Effect<
        { readonly token: RwLock.ReadToken; readonly lost: Effect.Effect<never, Lock.LockLost> },
        Failure,
        RwLockNeeds | Scope.Scope
      >
    >()
    expectTypeOf(RwLock.scopedWrite(DOCS, "a")).toEqualTypeOf<
      Effect.Effect<
        { readonly token: RwLock.WriteToken; readonly lost: Effect.Effect<never, Lock.LockLost> },
        Failure,
        RwLockNeeds | Scope.Scope
      >
    >()
  })

  it("the errors are tagged", () => {
    expectTypeOf<Lock.LockUnavailable["_tag"]>().toEqualTypeOf<"LeaseUnavailable">()
    expectTypeOf<Lock.LockLost["_tag"]>().toEqualTypeOf<"LeaseLost">()
    expectTypeOf<Lock.LockLost["reason"]>().toEqualTypeOf<"Expired" | "Unconfirmed">()
    expectTypeOf<Lock.LockLost["fence"]>().toEqualTypeOf<bigint | undefined>()
  })
})

describe("names and options are typed", () => {
  it("a lock's name type is enforced", () => {
    // @ts-expect-error a string lock takes string names
    JOBS.tryLock(5)
    // @ts-expect-error a number lock takes number names
    ROWS.tryLock("a")
    // @ts-expect-error a number RwLock takes number names
    PAGES.tryRead("a")
    // @ts-expect-error a string RwLock takes string names
    RwLock.withWrite(DOCS, 5)
    // @ts-expect-error a number lock takes number names
    Lock.withLock(ROWS, "a")
    expectTypeOf(ROWS.tryLock).parameter(0).toEqualTypeOf<number>()
    expectTypeOf(PAGES.tryWrite).parameter(0).toEqualTypeOf<number>()
    const BYTES = RwLock.make<Uint8Array>("bytes", "1 second")
    expectTypeOf(BYTES.tryRead).parameter(0).toEqualTypeOf<Uint8Array>()
  })

  it("the acquisition policy is tryOnce or wait", () => {
    Lock.withLock(JOBS, "a", { acquire: Lock.tryOnce })(Effect.void)
    Lock.withLock(JOBS, "a", { acquire: Lock.wait({ deadline: "5 seconds" }), renewEvery: "1 second" })(Effect.void)
    RwLock.withWrite(DOCS, "a", { acquire: Lock.wait() })(Effect.void)
    // @ts-expect-error not a policy
    Lock.withLock(JOBS, "a", { acquire: "wait" })(Effect.void)
  })
})

describe("one shape: type ids, guards, one token, neutral lease errors", () => {
  it("every leased structure has a guard that narrows to it", () => {
    const u: unknown = JOBS
    if (Lock.isLock(u)) expectTypeOf(u).toEqualTypeOf<Lock.Lock<never>>()
    if (RwLock.isRwLock(u)) expectTypeOf(u).toEqualTypeOf<RwLock.RwLock<never>>()
    if (Semaphore.isSemaphore(u)) expectTypeOf(u).toEqualTypeOf<Semaphore.Semaphore<never>>()
    if (Pipe.isPipe(u)) expectTypeOf(u).toEqualTypeOf<Pipe.Pipe<never, unknown>>()
    expectTypeOf(JOBS[Lock.TypeId]).toEqualTypeOf<Lock.TypeId>()
    expectTypeOf(DOCS[RwLock.TypeId]).toEqualTypeOf<RwLock.TypeId>()
  })

  it("LockToken and WriteToken are one generic token; a permit is one too, with its count", () => {
    expectTypeOf<Lock.LockToken>().toEqualTypeOf<Lock.Token<Lock.Requirements>>()
    expectTypeOf<RwLock.WriteToken>().toEqualTypeOf<Lock.Token<RwLock.Requirements>>()
    expectTypeOf<Semaphore.Permit>().toMatchTypeOf<Lock.Token<Semaphore.Requirements>>()
  })

  it("LockUnavailable and LockLost are other names of the neutral errors, the same classes", () => {
    expectTypeOf<Lock.LockUnavailable>().toEqualTypeOf<Lock.LeaseUnavailable>()
    expectTypeOf<Lock.LockLost>().toEqualTypeOf<Lock.LeaseLost>()
    expectTypeOf(Lock.LockUnavailable).toEqualTypeOf(Lock.LeaseUnavailable)
    expectTypeOf(Lock.LockLost).toEqualTypeOf(Lock.LeaseLost)
    expectTypeOf(RwLock.LeaseLost).toEqualTypeOf(Lock.LeaseLost)
    expectTypeOf(Semaphore.LeaseUnavailable).toEqualTypeOf(Lock.LeaseUnavailable)
    expectTypeOf<Lock.LeaseLostReason>().toEqualTypeOf<"Expired" | "Unconfirmed">()
    expectTypeOf<Lock.LeaseLostReason>().toEqualTypeOf<typeof Lock.LeaseLostReason.Type>()
  })

  it("the failure alias the signatures show is exported, the same on every leased structure", () => {
    expectTypeOf<Lock.Failure>().toEqualTypeOf<Lock.LeaseUnavailable | Redis.RedisError | Redis.InvalidInput>()
    expectTypeOf<RwLock.Failure>().toEqualTypeOf<Lock.Failure>()
    expectTypeOf<Semaphore.Failure>().toEqualTypeOf<Lock.Failure>()
    expectTypeOf(Semaphore.scoped(Semaphore.make("pool", 2, "1 second"), "a", 1)).toEqualTypeOf<
      Effect.Effect<
        { readonly permit: Semaphore.Permit; readonly lost: Effect.Effect<never, Lock.LeaseLost> },
        Semaphore.Failure,
        Semaphore.Requirements | Scope.Scope
      >
    >()
  })
})
