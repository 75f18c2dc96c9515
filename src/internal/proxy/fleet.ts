/**
 * @internal The one admin port of `wakuwaku proxy --workers N --admin-port PORT`, served by the primary, which asks
 * its workers over the cluster's IPC channel (./workers.ts); the workers bind no admin port of their own.
 *
 * - **`/metrics`**: the primary asks every worker that serves the port for its registry (./snapshot.ts), waits up
 *   to {@link METRICS_TIMEOUT} for each, and renders the sum of the answers and of its own registry
 *   (`wakuwaku_proxy_worker_restarts`), with two gauges of the scrape: `wakuwaku_proxy_workers` (the workers
 *   asked) and `wakuwaku_proxy_workers_unanswered` (those that did not answer in time: their counts are missing,
 *   and a comment line names them). A worker that died took its counters with it.
 * - **`/readyz`**: 503 until every worker first listens and from the start of shutdown (the primary turns it
 *   before it passes SIGTERM on); otherwise 200 only when every worker answers that it is ready (its own
 *   `/readyz`, ./admin.ts) within {@link READY_ASK_TIMEOUT}, with the reasons of those that are not.
 * - **`/healthz`**: 200 while the primary serves.
 *
 * A question is `{ wakuwaku: "admin-ask", id, what }`; its answer carries the same `id`.
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as MetricKey from "effect/MetricKey"
import * as MetricPair from "effect/MetricPair"
import * as MetricState from "effect/MetricState"
import * as Option from "effect/Option"
import type { Worker } from "node:cluster"
import * as admin from "./admin.js"
import { MetricName, scrapeGauges } from "./metrics.js"
import * as prometheus from "./prometheus.js"
import * as snapshot from "./snapshot.js"

/** @internal How long a scrape waits for each worker's registry: a stuck worker cannot hang it. */
export const METRICS_TIMEOUT = Duration.seconds(1)

/** @internal How long `/readyz` waits for each worker's answer: its own store PING waits up to 1 s. */
export const READY_ASK_TIMEOUT = Duration.seconds(2)

type What = "metrics" | "ready"

interface Ask {
  readonly wakuwaku: "admin-ask"
  readonly id: number
  readonly what: What
}

type Answer =
  | { readonly wakuwaku: "admin-answer"; readonly id: number; readonly series: ReadonlyArray<snapshot.Series> }
  | { readonly wakuwaku: "admin-answer"; readonly id: number; readonly status: number; readonly text: string }

const isAsk = (message: unknown): message is Ask =>
  typeof message === "object" && message !== null && (message as Partial<Ask>).wakuwaku === "admin-ask"

const isAnswer = (message: unknown, id: number): message is Answer =>
  typeof message === "object" && message !== null && (message as Partial<Answer>).wakuwaku === "admin-answer" &&
  (message as Partial<Answer>).id === id

/** The channel closed (the process is exiting): the question goes unanswered. */
const ignore = () => {}

/**
 * @internal A worker's {@link admin.Expose}: answers the primary's questions for the scope, from this process's
 * registry and readiness; no port, so no address.
 */
export const answer: admin.Expose = (_admin, state) =>
  Effect.acquireRelease(
    Effect.sync(() => {
      const send = (message: Answer) => {
        if (process.send !== undefined && process.connected) process.send(message, undefined, {}, ignore)
      }
      const onMessage = (message: unknown) => {
        if (!isAsk(message)) return
        const { id } = message
        if (message.what === "metrics") send({ wakuwaku: "admin-answer", id, series: snapshot.take() })
        else admin.ready(state, (status, text) => send({ wakuwaku: "admin-answer", id, status, text }))
      }
      process.on("message", onMessage)
      return onMessage
    }),
    (onMessage) => Effect.sync(() => process.off("message", onMessage))
  ).pipe(Effect.as(undefined))

let lastId = 0

/** Asks `worker`; none if it does not answer within `timeout` (or exits, or its channel is closed). */
const ask = (worker: Worker, what: What, timeout: Duration.Duration): Effect.Effect<Option.Option<Answer>> =>
  Effect.async<Option.Option<Answer>>((resume) => {
    const id = ++lastId
    const done = (answer: Option.Option<Answer>) => {
      worker.off("message", onMessage)
      worker.off("exit", onExit)
      resume(Effect.succeed(answer))
    }
    const onMessage = (message: unknown) => {
      if (isAnswer(message, id)) done(Option.some(message))
    }
    const onExit = () => done(Option.none())
    worker.on("message", onMessage)
    worker.once("exit", onExit)
    worker.send({ wakuwaku: "admin-ask", id, what } satisfies Ask, undefined, (error) => {
      if (error !== null) done(Option.none())
    })
    return Effect.sync(() => {
      worker.off("message", onMessage)
      worker.off("exit", onExit)
    })
  }).pipe(Effect.timeoutTo({ duration: timeout, onTimeout: Option.none, onSuccess: (answer) => answer }))

/** @internal What the primary knows of its workers. */
export interface Fleet {
  /** Every worker process now, and whether it serves the port (it has listened). */
  readonly workers: () => ReadonlyArray<{ readonly worker: Worker; readonly listening: boolean }>
  /** Whether the proxy serves: every worker has listened once, and shutdown has not begun. */
  readonly serving: () => boolean
}

const pidOf = (worker: Worker): string => String(worker.process.pid)

const gauge = (name: string, description: string, value: number): MetricPair.MetricPair.Untyped =>
  MetricPair.unsafeMake(MetricKey.gauge(name, { description }), MetricState.gauge(value))

/** A comment line naming the workers that did not answer a scrape (a parser skips it), or nothing. */
const missing = (pids: ReadonlyArray<string>): string => {
  if (pids.length === 0) return ""
  const [who, whose] = pids.length === 1 ? ["worker", "its"] : ["workers", "their"]
  const within = Duration.format(METRICS_TIMEOUT)
  return `# wakuwaku: ${who} ${pids.join(", ")} did not answer within ${within}: ${whose} counts are missing from ` +
    "this scrape\n"
}

/** The text of one scrape: the workers' registries and the primary's, added up. */
const scrape = (fleet: Fleet): Effect.Effect<string> =>
  Effect.gen(function*() {
    const serving = fleet.workers().filter((w) => w.listening).map((w) => w.worker)
    const answers = yield* Effect.forEach(serving, (worker) => ask(worker, "metrics", METRICS_TIMEOUT), {
      concurrency: "unbounded"
    })
    const registries = [snapshot.take()]
    const silent: Array<string> = []
    answers.forEach((answer, i) => {
      if (Option.isSome(answer) && "series" in answer.value) registries.push([...answer.value.series])
      else silent.push(pidOf(serving[i]!))
    })
    const pairs = [
      ...snapshot.toPairs(snapshot.merge(registries)),
      gauge(MetricName.workers, scrapeGauges.workers, serving.length),
      gauge(MetricName.workersUnanswered, scrapeGauges.workersUnanswered, silent.length)
    ]
    return missing(silent) + prometheus.render(pairs)
  })

/** `/readyz` of the whole proxy: ready when every worker is; otherwise why not, worker by worker. */
const readiness = (fleet: Fleet): Effect.Effect<{ readonly status: number; readonly text: string }> =>
  Effect.gen(function*() {
    const workers = fleet.workers()
    if (workers.length === 0) return { status: 503, text: "not ready: no worker serves\n" }
    const answers = yield* Effect.forEach(workers, ({ listening, worker }) =>
      listening
        ? Effect.map(ask(worker, "ready", READY_ASK_TIMEOUT), (answer) =>
          Option.isSome(answer) && "status" in answer.value
            ? { pid: pidOf(worker), status: answer.value.status, text: answer.value.text.trim() }
            : {
              pid: pidOf(worker),
              status: 503,
              text: `did not answer within ${Duration.format(READY_ASK_TIMEOUT)}`
            })
        : Effect.succeed({ pid: pidOf(worker), status: 503, text: "starting" }), { concurrency: "unbounded" })
    const unready = answers.filter((a) => a.status !== 200)
    if (unready.length > 0) {
      const why = unready.map((a) => `worker ${a.pid}: ${a.text.replace(/^not ready: /, "")}`)
      return { status: 503, text: `not ready: ${why.join("; ")}\n` }
    }
    // The workers share the store and its policy, so they normally say the same.
    if (new Set(answers.map((a) => a.text)).size === 1) return { status: 200, text: `${answers[0]!.text}\n` }
    return { status: 200, text: `ready: ${answers.map((a) => `worker ${a.pid}: ${a.text}`).join("; ")}\n` }
  })

/** @internal The primary's {@link admin.Source}: its workers asked, their answers added up. */
export const source = (fleet: Fleet): admin.Source => ({
  metrics: (reply) =>
    Effect.runCallback(scrape(fleet), { onExit: (exit) => reply(Exit.isSuccess(exit) ? exit.value : "") }),
  ready: (reply) => {
    if (!fleet.serving()) return reply(503, "not ready: not serving (starting or shutting down)\n")
    Effect.runCallback(readiness(fleet), {
      onExit: (exit) =>
        Exit.isSuccess(exit) ? reply(exit.value.status, exit.value.text) : reply(503, "not ready: interrupted\n")
    })
  }
})
