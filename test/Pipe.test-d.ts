import { Effect, Schema, Stream } from "effect"
import { describe, expectTypeOf, it } from "vitest"
import { Capability, Lock, Pipe, Redis } from "wakuwaku"

class Frame extends Schema.Class<Frame>("Frame")({ text: Schema.String }) {}
const TO_CLIENT = Pipe.make<string, Frame>("to-client", Frame, "60 seconds")
const TO_SERVER = Pipe.make<number, { readonly n: number }>(
  "to-server",
  Schema.Struct({ n: Schema.Number }),
  "60 seconds"
)

type PipeNeeds = Redis.Redis | Capability.Write<Capability.Entity<"Pipe">>

const needs = <A, E, R>(_: Effect.Effect<A, E, R>) => expectTypeOf<R>()
const streamNeeds = <A, E, R>(_: Stream.Stream<A, E, R>) => expectTypeOf<R>()

/** Every Pipe operation, as a program to run. */
const programs = {
  send: TO_CLIENT.send("s", new Frame({ text: "hello" })),
  close: TO_CLIENT.close("s"),
  receive: Stream.runDrain(TO_CLIENT.receive("s")),
  receiveAtLeastOnce: Stream.runDrain(TO_CLIENT.receive("s", { delivery: "at-least-once" })),
  heartbeat: Pipe.heartbeat(TO_CLIENT, "s")
}

describe("Pipe types", () => {
  it("the documented declaration: Pipe.make<string, Frame>(namespace, Frame, ttl)", () => {
    expectTypeOf(TO_CLIENT).toEqualTypeOf<Pipe.Pipe<string, Frame>>()
    expectTypeOf(TO_CLIENT.schema).toEqualTypeOf<Pipe.MessageSchema<Frame>>()
    // The type argument is inferred from the schema when not given.
    expectTypeOf(Pipe.make("x", Schema.NumberFromString, "1 second")).toEqualTypeOf<Pipe.Pipe<string, number>>()
  })

  it("a schema that needs a service cannot carry messages", () => {
    class Dep extends Effect.Tag("Dep")<Dep, { readonly ok: boolean }>() {}
    const needy = Schema.String.pipe(Schema.filterEffect(() => Effect.map(Dep, (dep) => dep.ok)))
    // @ts-expect-error a MessageSchema has no requirements
    Pipe.make("needy", needy, "1 second")
    expectTypeOf<typeof needy.Context>().toEqualTypeOf<Dep>()
  })

  it("names are typed", () => {
    // @ts-expect-error a number pipe takes number names
    TO_SERVER.send("a", { n: 1 })
    // @ts-expect-error messages are typed
    TO_SERVER.send(1, { n: "1" })
    TO_SERVER.send(1, { n: 1 })
  })

  it("the Requirements alias is Redis | Write of the pipe entity", () => {
    expectTypeOf<Pipe.Requirements>().toEqualTypeOf<PipeNeeds>()
    expectTypeOf<Pipe.Entity>().toEqualTypeOf<Capability.Entity<"Pipe">>()
    expectTypeOf(Pipe.entity).toEqualTypeOf<Pipe.Entity>()
  })

  it("results and error channels are exact", () => {
    expectTypeOf(TO_CLIENT.send("s", new Frame({ text: "a" }))).toEqualTypeOf<
      Effect.Effect<void, Redis.RedisError | Redis.InvalidInput, PipeNeeds>
    >()
    expectTypeOf(TO_CLIENT.close("s")).toEqualTypeOf<
      Effect.Effect<void, Redis.RedisError | Redis.InvalidInput, PipeNeeds>
    >()
    expectTypeOf(TO_CLIENT.receive("s")).toEqualTypeOf<
      Stream.Stream<
        Frame,
        Redis.RedisError | Redis.InvalidInput | Pipe.MessageError | Pipe.PipeAbandoned | Pipe.PipeBusy,
        PipeNeeds
      >
    >()
    expectTypeOf(Pipe.heartbeat(TO_CLIENT, "s")).toEqualTypeOf<
      Effect.Effect<never, Redis.RedisError | Redis.InvalidInput, PipeNeeds>
    >()
  })

  it("every operation needs exactly Redis | Write<Entity<\"Pipe\">>, receiving included", () => {
    needs(programs.send).toEqualTypeOf<PipeNeeds>()
    needs(programs.close).toEqualTypeOf<PipeNeeds>()
    needs(programs.receive).toEqualTypeOf<PipeNeeds>()
    needs(programs.receiveAtLeastOnce).toEqualTypeOf<PipeNeeds>()
    needs(programs.heartbeat).toEqualTypeOf<PipeNeeds>()
    streamNeeds(TO_CLIENT.receive("s")).toEqualTypeOf<PipeNeeds>()
  })

  it("duplex: one pipe per direction, flipped for the other end", () => {
    const server = Pipe.duplex(TO_CLIENT, Pipe.make<string, number>("up", Schema.Number, "1 minute"))
    expectTypeOf(server).toEqualTypeOf<Pipe.Duplex<string, Frame, number>>()
    expectTypeOf(server.flip).toEqualTypeOf<Pipe.Duplex<string, number, Frame>>()
    expectTypeOf(server.receive("s")).toEqualTypeOf<Stream.Stream<number, Pipe.ReceiveError, PipeNeeds>>()
    needs(server.send("s", new Frame({ text: "a" }))).toEqualTypeOf<PipeNeeds>()
    // @ts-expect-error this end sends frames
    server.send("s", 1)
  })
})

describe("with only the read-only capability, nothing sends or receives", () => {
  it("each operation leaves Write<Entity<\"Pipe\">> and does not run", () => {
    const send = programs.send.pipe(Effect.provide(Redis.layerReadOnly()))
    needs(send).toEqualTypeOf<Capability.Write<Pipe.Entity>>()
    // @ts-expect-error Write<Entity<"Pipe">> is missing
    Effect.runPromise(send)

    const close = programs.close.pipe(Effect.provide(Redis.layerReadOnly()))
    needs(close).toEqualTypeOf<Capability.Write<Pipe.Entity>>()
    // @ts-expect-error Write<Entity<"Pipe">> is missing
    Effect.runPromise(close)

    const receive = programs.receive.pipe(Effect.provide(Redis.layerReadOnly()))
    needs(receive).toEqualTypeOf<Capability.Write<Pipe.Entity>>()
    // @ts-expect-error Write<Entity<"Pipe">> is missing
    Effect.runPromise(receive)

    const receiveAtLeastOnce = programs.receiveAtLeastOnce.pipe(Effect.provide(Redis.layerReadOnly()))
    needs(receiveAtLeastOnce).toEqualTypeOf<Capability.Write<Pipe.Entity>>()
    // @ts-expect-error Write<Entity<"Pipe">> is missing
    Effect.runPromise(receiveAtLeastOnce)

    const heartbeat = programs.heartbeat.pipe(Effect.provide(Redis.layerReadOnly()))
    needs(heartbeat).toEqualTypeOf<Capability.Write<Pipe.Entity>>()
    // @ts-expect-error Write<Entity<"Pipe">> is missing
    Effect.runPromise(heartbeat)

    // The stream itself, given the read-only layer, still needs the write.
    const stream = TO_CLIENT.receive("s").pipe(Stream.provideSomeLayer(Redis.layerReadOnly()))
    streamNeeds(stream).toEqualTypeOf<Capability.Write<Pipe.Entity>>()
    // @ts-expect-error Write<Entity<"Pipe">> is missing
    Effect.runPromise(Stream.runDrain(stream))
  })

  it("a grant for another entity does not help; a grant for pipes does", () => {
    const LocksOnly = Capability.layer({ write: [Lock.entity] })
    const send = programs.send.pipe(Effect.provide(LocksOnly), Effect.provide(Redis.layerReadOnly()))
    needs(send).toEqualTypeOf<Capability.Write<Pipe.Entity>>()
    // @ts-expect-error Write<Entity<"Pipe">> is missing
    Effect.runPromise(send)

    const PipesOnly = Capability.layer({ write: [Pipe.entity] })
    const receive = programs.receive.pipe(Effect.provide(PipesOnly), Effect.provide(Redis.layerReadOnly()))
    needs(receive).toEqualTypeOf<never>()
    Effect.runPromise(receive)
  })
})

describe("with read-write, everything compiles", () => {
  it("all operations", () => {
    for (const program of Object.values(programs)) {
      const provided = program.pipe(Effect.provide(Redis.layer()))
      needs(provided).toEqualTypeOf<never>()
    }
    Effect.runPromise(programs.receive.pipe(Effect.provide(Redis.layer())))
    Effect.runPromise(Stream.runDrain(TO_CLIENT.receive("s").pipe(Stream.provideLayer(Redis.layer()))))
  })
})
