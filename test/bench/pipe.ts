/**
 * `npm run bench` (third part): end-to-end pipe throughput for 1 KB messages, send to receive, wakuwaku
 * `Pipe` against a raw ioredis RPUSH/BLPOP loop, on one throwaway redis-server (RedisServer.make),
 * rounds alternated.
 *
 * - wakuwaku: `P.send(name, message)` in a loop, one after another, while `P.receive(name)` runs
 *   (`Stream.take(count)`, `Stream.runDrain`), in at-most-once mode (the default) and, for reference,
 *   at-least-once. Messages are `{ seq, body }` with a 1000-character body, encoded to JSON through the
 *   schema on send and decoded on receive (about 1 KB of payload). One `Redis.layer({ url })` context,
 *   built before anything is timed; each receiver opens its own dedicated connection, as it must.
 * - raw ioredis: `RPUSH` of the same JSON (encoded once, up front; never decoded) in a loop on a plain
 *   client (default options, no auto-pipelining), while a loop of `BLPOP key 0` on a second plain
 *   client per pipe takes them: the least a pipe can do, with no typing, no TTL, no close, no lease and
 *   no safety on interruption.
 * - two floors, to tell what costs what (see `floorPipe`): the library's own scripts sent by raw ioredis
 *   (the protocol's cost), and the same inside a bare `Effect.async`, `Stream` and the schema (the least
 *   any Effect implementation of this API pays).
 *
 * Rounds: one pipe carrying 20 000 messages, then 16 pipes at once carrying 1 250 each (20 000 in all),
 * every sender and receiver concurrently in this one Node process. Throughput is messages received per
 * second, timed from the first send to the last message received. Every message must arrive, in order,
 * or the benchmark stops. Every round starts from an empty database (FLUSHALL, untimed). One untimed
 * warm-up round per contender and shape, then 5 timed rounds; medians with min–max.
 */
import { Channel, Chunk, Effect, Either, Layer, Schema, Stream } from "effect"
import type { Context } from "effect"
import { Redis as IORedis } from "ioredis"
import { availableParallelism } from "node:os"
import { performance } from "node:perf_hooks"
import { Pipe, Redis } from "wakuwaku"
import { FETCH, OPEN, SEND } from "wakuwaku/internal/pipe/scripts"
import { RedisServer } from "wakuwaku/testing"
import { median, plainClient, stat } from "./measure.js"

/** `--quick` (development): fewer messages, 2 timed rounds. */
const QUICK = process.argv.includes("--quick")
const TOTAL = QUICK ? 10_000 : 20_000
const ROUNDS = QUICK ? 2 : 5
const SHAPES = [1, 16] as const

const Message = Schema.Struct({ seq: Schema.Number, body: Schema.String })
type Message = typeof Message.Type
const encode = Schema.encodeEither(Schema.parseJson(Message))
const decode = Schema.decodeUnknownEither(Schema.parseJson(Message))
const BODY = "x".repeat(1000)
const PIPE = Pipe.make<string, Message>("bench", Message, "60 seconds")
const payloadOf = (seq: number) => JSON.stringify({ seq, body: BODY })

type Env = Context.Context<Redis.ReadWrite>
type Delivery = Pipe.Delivery

/** One wakuwaku pipe: its sender and its receiver, concurrently; dies unless all arrive in order. */
const wakuPipe = (name: string, count: number, delivery: Delivery) => {
  let expected = 0
  const receive = PIPE.receive(name, { delivery }).pipe(
    Stream.take(count),
    Stream.runForEach((m) =>
      m.seq === expected++ ? Effect.void : Effect.dieMessage(`${name}: got ${m.seq}, expected ${expected - 1}`)
    )
  )
  let sent = 0
  const send = Effect.whileLoop({
    while: () => sent < count,
    body: () => PIPE.send(name, { seq: sent++, body: BODY }),
    step: () => {}
  })
  return Effect.zipRight(
    Effect.all([receive, send], { concurrency: 2, discard: true }),
    Effect.sync(() => {
      if (expected !== count) throw new Error(`${name}: ${expected} of ${count} arrived`)
    })
  )
}

const wakuRound = (env: Env, pipes: number, delivery: Delivery): Promise<void> =>
  Effect.runPromise(
    Effect.all(
      Array.from({ length: pipes }, (_, i) => wakuPipe(`p${i}`, TOTAL / pipes, delivery)),
      { concurrency: "unbounded", discard: true }
    ).pipe(Effect.provide(env))
  )

/** One raw pipe: RPUSH in a loop on the shared client, BLPOP in a loop on the pipe's own client. */
const rawPipe = async (client: IORedis, blocking: IORedis, key: string, count: number): Promise<void> => {
  const payloads = Array.from({ length: count }, (_, seq) => payloadOf(seq))
  const send = async () => {
    for (const payload of payloads) await client.rpush(key, payload)
  }
  const receive = async () => {
    for (let seq = 0; seq < count; seq++) {
      const reply = await blocking.blpop(key, 0)
      if (reply?.[1] !== payloads[seq]) throw new Error(`${key}: message ${seq} out of order`)
    }
  }
  await Promise.all([receive(), send()])
}

const rawRound = (client: IORedis, blocking: ReadonlyArray<IORedis>, pipes: number): Promise<void> =>
  Promise.all(Array.from({ length: pipes }, (_, i) => rawPipe(client, blocking[i]!, `raw:p${i}`, TOTAL / pipes)))
    .then(() => {})

/**
 * The floors: wakuwaku's own scripts (SEND per message; OPEN, then BLMOVE to `inflight` per message
 * and a FETCH after every 64 to drop them, as a caught-up receiver does), sent by plain ioredis, with
 * none of the library's code. `effect`: each call in a bare `Effect.async`, the messages through a bare
 * `Stream` (one message per chunk from a looping channel, then `take` and `runForEach`) and the schema
 * (JSON encode on send, decode on receive): what an Effect implementation of the API pays at the least.
 */
const floorPipe = async (client: IORedis, blocking: IORedis, name: string, count: number, effect: boolean) => {
  const k = (suffix: string) => `@@wakuwaku:Pipe:{floor:${name}}:${suffix}`
  const [messages, closed, inflight, receiver] = [k("messages"), k("closed"), k("inflight"), k("receiver")]
  await client.evalsha(OPEN.sha1, 4, receiver, inflight, messages, closed, "token", "60000", "most", "120000")
  let done = 0
  let dropped = 0
  let buffer: Array<string> = []
  /** The next payload: from what the last FETCH moved, else a FETCH (every 64), else a BLMOVE. */
  const nextRaw = async (): Promise<string> => {
    while (buffer.length === 0 && done - dropped >= 64) {
      buffer =
        (await client.evalsha(FETCH.sha1, 3, receiver, inflight, messages, "token", String(done), "64")) as Array<
          string
        >
      dropped = done
    }
    done++
    const moved = buffer.shift() ?? await blocking.blmove(messages, inflight, "LEFT", "RIGHT", 60)
    if (moved === null) throw new Error(`${name}: nothing for 60 s`)
    return moved
  }
  const sendRaw = (payload: string) => client.evalsha(SEND.sha1, 3, messages, closed, inflight, payload, "60000")
  if (!effect) {
    const payloads = Array.from({ length: count }, (_, seq) => payloadOf(seq))
    const send = async () => {
      for (const payload of payloads) await sendRaw(payload)
    }
    const receive = async () => {
      for (let seq = 0; seq < count; seq++) {
        if ((await nextRaw()) !== payloads[seq]) throw new Error(`${name}: message ${seq} out of order`)
      }
    }
    return void (await Promise.all([receive(), send()]))
  }
  let sent = 0
  let expected = 0
  const send = Effect.whileLoop({
    while: () => sent < count,
    body: () =>
      Effect.async<unknown>((resume) => {
        const payload = Either.getOrThrow(encode({ seq: sent++, body: BODY }))
        sendRaw(payload).then((reply) => resume(Effect.succeed(reply)), (e: unknown) => resume(Effect.die(e)))
      }),
    step: () => {}
  })
  const pull = Effect.async<Message>((resume) => {
    nextRaw().then(
      (raw) => resume(Effect.succeed(Either.getOrThrow(decode(raw)))),
      (e: unknown) => resume(Effect.die(e))
    )
  })
  // A stream of one message per chunk, as a looping channel: the cheapest construction measured.
  const loop: Channel.Channel<Chunk.Chunk<Message>> = Channel.flatMap(
    Channel.fromEffect(pull),
    (m) => Channel.zipRight(Channel.write(Chunk.of(m)), Channel.suspend(() => loop))
  )
  const receive = Stream.fromChannel(loop).pipe(
    Stream.take(count),
    Stream.runForEach((m) => m.seq === expected++ ? Effect.void : Effect.dieMessage(`${name}: got ${m.seq}`))
  )
  await Effect.runPromise(Effect.all([receive, send], { concurrency: 2, discard: true }))
  if (expected !== count) throw new Error(`${name}: ${expected} of ${count} arrived`)
}

const floorRound = (client: IORedis, blocking: ReadonlyArray<IORedis>, pipes: number, effect: boolean): Promise<void> =>
  Promise.all(Array.from({ length: pipes }, (_, i) => floorPipe(client, blocking[i]!, `p${i}`, TOTAL / pipes, effect)))
    .then(() => {})

interface Contender {
  readonly label: string
  readonly run: (pipes: number) => Promise<void>
  readonly results: Map<number, Array<number>>
}

const measure = async (env: Env, client: IORedis, blocking: ReadonlyArray<IORedis>, url: string) => {
  const contenders: ReadonlyArray<Contender> = [
    { label: "wakuwaku `Pipe`, at-most-once", run: (n) => wakuRound(env, n, "at-most-once"), results: new Map() },
    { label: "raw ioredis RPUSH / BLPOP", run: (n) => rawRound(client, blocking, n), results: new Map() },
    { label: "wakuwaku `Pipe`, at-least-once", run: (n) => wakuRound(env, n, "at-least-once"), results: new Map() },
    {
      label: "floor: wakuwaku's scripts by raw ioredis (no Effect, no schema)",
      run: (n) => floorRound(client, blocking, n, false),
      results: new Map()
    },
    {
      label: "floor: the same in bare `Effect.async`, `Stream` and the schema (no library code)",
      run: (n) => floorRound(client, blocking, n, true),
      results: new Map()
    }
  ]
  const timed = async (contender: Contender, pipes: number) => {
    await client.flushall()
    const start = performance.now()
    await contender.run(pipes)
    return TOTAL / ((performance.now() - start) / 1000)
  }

  const version = String(await client.info("server")).match(/redis_version:(\S+)/)?.[1] ?? "?"
  console.log(`node ${process.version}, ${availableParallelism()} cores, redis-server ${version} (${url})`)
  console.log(
    `${TOTAL} messages of ${payloadOf(0).length} bytes per round, through 1 pipe, then 16 pipes at once; ` +
      `${ROUNDS} timed rounds each after 1 warm-up, alternating\n`
  )
  for (const pipes of SHAPES) {
    for (const contender of contenders) await timed(contender, pipes)
    for (let round = 1; round <= ROUNDS; round++) {
      for (const contender of contenders) {
        const rate = await timed(contender, pipes)
        const list = contender.results.get(pipes) ?? []
        list.push(rate)
        contender.results.set(pipes, list)
        console.log(`round ${round}, ${pipes} pipe(s), ${contender.label}: ${Math.round(rate)} messages/s`)
      }
    }
  }

  console.log("\nmedian messages/s over rounds (min–max):\n")
  console.log("| contender | 1 pipe | 16 pipes |")
  console.log("|---|---:|---:|")
  for (const c of contenders) {
    console.log(`| ${c.label} | ${stat(c.results.get(1) ?? [], 0, true)} | ${stat(c.results.get(16) ?? [], 0, true)} |`)
  }
  const [waku, raw, least, scripts, bare] = contenders
  const over = (c: Contender | undefined, pipes: number) =>
    (median(c!.results.get(pipes)!) / median(raw!.results.get(pipes)!)).toFixed(2)
  console.log("\ntargets:")
  for (const pipes of SHAPES) {
    const ratio = median(waku!.results.get(pipes)!) / median(raw!.results.get(pipes)!)
    console.log(
      `- ${pipes} pipe(s): at-most-once/raw = ${ratio.toFixed(2)}× (target ≥ 0.8×): ${
        ratio >= 0.8 ? "MET" : "MISSED"
      }; ` +
        `at-least-once/raw = ${over(least, pipes)}× (no target); floors over raw: the scripts alone ` +
        `${over(scripts, pipes)}×, in bare Effect + Stream + schema ${over(bare, pipes)}×`
    )
  }
}

const program = Effect.scoped(
  Effect.gen(function*() {
    const server = yield* RedisServer.make()
    const env = yield* Layer.build(Redis.layer({ url: server.url }))
    const client = yield* plainClient(server.url)
    const blocking = yield* Effect.all(Array.from({ length: 16 }, () => plainClient(server.url)))
    // The floors send the library's scripts by EVALSHA: loaded up front (FLUSHALL keeps them).
    yield* Effect.promise(() => Promise.all([OPEN, SEND, FETCH].map((script) => client.script("LOAD", script.lua))))
    yield* Effect.promise(() => measure(env, client, blocking, server.url))
  })
)

Effect.runPromise(program).catch((error: unknown) => {
  console.error(error)
  process.exitCode = 1
})
