/**
 * What survives the wire, as a property: for arbitrary values of several schemas (numbers with NaN, the
 * infinities and -0; anything at all, bigints, dates, maps, sparse arrays and undefined included; a
 * struct with an optional field and a date; a class; bigints encoded as strings; dates left unencoded),
 * each value sent through a pipe is either received equal or refused at `send` with `InvalidInput`,
 * never both sent and undecodable (which would end the receiver with `MessageError`). On the throwaway
 * server and on the embedded backend.
 *
 * Equal: the schema's own equivalence (`Schema.equivalence`) for typed schemas; for `Schema.Unknown`,
 * whose equivalence is reference equality, equal as JSON values (`===` on numbers, so -0 equals 0,
 * which is the one change JSON makes that `send` lets through).
 */
import { Chunk, Effect, Either, Equivalence, type ManagedRuntime, Schema, Stream } from "effect"
import * as Runtime from "effect/ManagedRuntime"
import fc from "fast-check"
import { afterAll, describe, expect, it } from "vitest"
import { Pipe, Redis } from "wakuwaku"
import { freshNamespace, RedisLive } from "./support/redis.js"

const RUNS = Number(process.env["WAKUWAKU_WIRE_RUNS"] ?? 40)

class Frame extends Schema.Class<Frame>("Frame")({ text: Schema.String, n: Schema.Number }) {}

const Order = Schema.Struct({
  id: Schema.Number,
  tags: Schema.Array(Schema.String),
  note: Schema.optional(Schema.String),
  at: Schema.Date
})
type Order = typeof Order.Type

/** Equal as JSON values: `===` on primitives, recursively on arrays and plain objects. */
const jsonEqual = (a: unknown, b: unknown): boolean => {
  if (a === b) return true
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false
  if (Array.isArray(a) !== Array.isArray(b)) return false
  const ka = Object.keys(a)
  const kb = Object.keys(b)
  return ka.length === kb.length &&
    ka.every((k) =>
      Object.hasOwn(b, k) && jsonEqual((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k])
    )
}

interface Case<A> {
  readonly title: string
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- each case has its own encoded form
  readonly schema: Schema.Schema<A, any, never>
  readonly values: fc.Arbitrary<A>
  readonly equal: Equivalence.Equivalence<A>
}
const make = <A>(c: Case<A>) => c as unknown as Case<unknown>

const date = fc.date({ noInvalidDate: false })
const number = fc.oneof(fc.double(), fc.constantFrom(NaN, Infinity, -Infinity, -0, 0))

const cases: ReadonlyArray<Case<unknown>> = [
  make({ title: "Schema.Number", schema: Schema.Number, values: number, equal: Schema.equivalence(Schema.Number) }),
  make({
    title: "Schema.Unknown",
    schema: Schema.Unknown,
    values: fc.anything({
      withBigInt: true,
      withDate: true,
      withMap: true,
      withSet: true,
      withSparseArray: true,
      withNullPrototype: true,
      withBoxedValues: true,
      withTypedArray: true,
      values: [fc.boolean(), number, fc.string(), fc.constant(null), fc.constant(undefined)]
    }),
    equal: jsonEqual
  }),
  make<Order>({
    title: "a struct with an optional field and a date",
    schema: Order,
    values: fc.record(
      {
        id: number,
        tags: fc.array(fc.string(), { maxLength: 3 }),
        note: fc.option(fc.string(), { nil: undefined }),
        at: date
      },
      { requiredKeys: ["id", "tags", "at"] }
    ),
    equal: Schema.equivalence(Order)
  }),
  make<Frame>({
    title: "a Schema.Class",
    schema: Frame,
    values: fc.record({ text: fc.string(), n: number }).map((fields) => new Frame(fields)),
    equal: Schema.equivalence(Frame)
  }),
  make<bigint>({
    title: "Schema.BigInt (bigints as strings)",
    schema: Schema.BigInt,
    values: fc.bigInt(),
    equal: Schema.equivalence(Schema.BigInt)
  }),
  make<Date>({
    title: "Schema.DateFromSelf (dates left unencoded)",
    schema: Schema.DateFromSelf,
    values: date,
    equal: Schema.equivalence(Schema.DateFromSelf)
  })
]

const runtimes: Record<"Redis" | "memory", ManagedRuntime.ManagedRuntime<Redis.ReadWrite, Redis.RedisError>> = {
  Redis: Runtime.make(RedisLive),
  memory: Runtime.make(Redis.layerMemory())
}
afterAll(() => Promise.all(Object.values(runtimes).map((runtime) => runtime.dispose())))

for (const backend of ["Redis", "memory"] as const) {
  describe(`Pipe messages over the wire, on ${backend}`, () => {
    for (const c of cases) {
      it(`${c.title}: each value is received equal or refused at send, never sent and undecodable`, async () => {
        const P = Pipe.make<string, unknown>(freshNamespace("wire"), c.schema, "10 seconds")
        let n = 0
        await fc.assert(
          fc.asyncProperty(fc.array(c.values, { minLength: 1, maxLength: 6 }), async (values) => {
            const name = `p${n++}`
            const program = Effect.gen(function*() {
              const accepted: Array<unknown> = []
              for (const value of values) {
                const sent = yield* Effect.either(P.send(name, value))
                if (Either.isRight(sent)) accepted.push(value)
                else if (sent.left._tag !== "InvalidInput" || sent.left.argument !== "message") {
                  return yield* Effect.die(sent.left)
                }
              }
              yield* P.close(name)
              // A payload that does not decode fails this stream with MessageError, and the property with it.
              const received = Chunk.toArray(yield* Stream.runCollect(P.receive(name)))
              return { accepted, received }
            })
            const { accepted, received } = await runtimes[backend].runPromise(program)
            expect(received.length).toBe(accepted.length)
            accepted.forEach((value, i) => {
              if (!c.equal(value, received[i])) {
                throw new Error(`sent ${String(value)}, received ${String(received[i])}`)
              }
            })
          }),
          { numRuns: RUNS }
        )
      }, 60_000)
    }
  })
}
