/**
 * @internal `wakuwaku proxy --workers N|auto`: N processes serving one port (node:cluster), sharing their limits
 * through Redis.
 *
 * - **The primary** forks the workers (each runs the same command line and listens on the same port, which the
 *   primary holds and hands connections out from, round-robin), prints the banner once every worker listens,
 *   and passes on SIGHUP (each worker reads the configuration file again: ./reload.ts) and SIGINT/SIGTERM (each
 *   drains as one process does, within `--shutdown-timeout`); it exits once they all have.
 * - **A worker that dies is replaced**, the event logged with its exit code or signal and counted
 *   (`wakuwaku_proxy_worker_restarts`). A worker that dies before it ever listened ends the proxy instead (its
 *   reason is on stderr): a start that fails would fail again.
 * - **One admin port** (`--admin-port`), served by the primary before it forks (./fleet.ts): `/metrics` adds up
 *   the workers' registries and the primary's own, `/readyz` asks every worker. On SIGINT/SIGTERM it turns
 *   `/readyz` to 503 before it passes SIGTERM on; each worker then serves on for `--drain-delay` and drains; the
 *   admin port closes once they all have exited.
 * - **Limits are shared through Redis.** With the embedded store each worker would keep limits of its own, so
 *   a client would get N times its limit: the command line refuses `--workers` above 1 without `--redis`
 *   (./cli.ts).
 */
import * as Cause from "effect/Cause"
import * as Console from "effect/Console"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Metric from "effect/Metric"
import * as Runtime from "effect/Runtime"
import Cluster from "node:cluster"
import type { Worker } from "node:cluster"
import type { Address } from "../../Proxy.js"
import * as admin from "./admin.js"
import type { Config } from "./cli.js"
import * as fleet from "./fleet.js"
import { workerRestarts } from "./metrics.js"

/** @internal What a worker tells the primary once it listens: the banner it would have printed. */
interface Listening {
  readonly wakuwaku: "listening"
  readonly banner: string
}

const isListening = (message: unknown): message is Listening =>
  typeof message === "object" && message !== null && (message as Partial<Listening>).wakuwaku === "listening"

/** @internal Whether this process is a worker of `--workers` (then it reports its banner instead of printing it). */
export const isWorker = (): boolean => Cluster.isWorker

/** @internal In a worker, tells the primary it listens; elsewhere, prints the banner. */
export const listening = (banner: string): Effect.Effect<void> =>
  Cluster.isWorker && process.send !== undefined
    ? Effect.sync(() => void process.send!({ wakuwaku: "listening", banner } satisfies Listening))
    : Console.log(banner)

/** How a worker ended, in words. */
const ended = (code: number | null, signal: string | null): string =>
  signal === null ? `exited with code ${code}` : `was killed by ${signal}`

/**
 * The banner of the workers: the first worker's (which has no admin line: the workers serve none), with a line
 * naming them and the primary's admin port.
 */
const withWorkers = (banner: string, pids: ReadonlyArray<number>, adminAddress: Address | undefined): string => {
  const lines = banner.split("\n")
  const at = lines.findIndex((line) => line.startsWith("  store:"))
  lines.splice(
    at + 1,
    0,
    `  workers:  ${pids.length} processes (${pids.join(", ")}), sharing the port and the store`,
    ...(adminAddress === undefined ? [] : [admin.bannerLine(adminAddress)])
  )
  return lines.join("\n")
}

/**
 * @internal The primary of `--workers`: serves the admin port if asked (./fleet.ts), forks `config.workers`
 * workers, prints the banner once they all listen, passes SIGHUP on, replaces a worker that dies (and counts it),
 * and on interruption (SIGINT/SIGTERM under `runMain`) turns `/readyz` to 503, passes SIGTERM on and waits for
 * every worker to exit (SIGKILL past the drain delay, the shutdown timeout and 5 s more).
 */
export const primary = (config: Config): Effect.Effect<never, Error> =>
  Effect.gen(function*() {
    const runFork = Runtime.runFork(yield* Effect.runtime<never>())
    const workers = new Map<number, Worker>()
    /** The workers that have listened, by id. */
    const listening = new Set<number>()
    const started = yield* Deferred.make<ReadonlyArray<number>, Error>()
    let stopping = false
    let serving = false
    /** Called once the last worker has exited, while stopping. */
    let drained = () => {}
    let firstBanner: string | undefined
    // Shown from the start, at 0: an operator's alert on it needs the series.
    yield* Metric.incrementBy(workerRestarts, 0)
    // Opened first, so it closes last: /readyz says 503 until every worker has exited.
    const adminAddress = config.admin === undefined ? undefined : yield* admin.serve(
      config.admin,
      fleet.source({
        workers: () => [...workers.values()].map((worker) => ({ worker, listening: listening.has(worker.id) })),
        serving: () => serving && !stopping
      })
    )
    const fork = (): Worker => {
      const worker = Cluster.fork()
      workers.set(worker.id, worker)
      worker.on("message", (message: unknown) => {
        if (!isListening(message) || listening.has(worker.id)) return
        listening.add(worker.id)
        if (serving) {
          runFork(Effect.logInfo(`proxy: worker ${worker.process.pid} listens`))
          return
        }
        firstBanner ??= message.banner
        if (listening.size === config.workers) {
          serving = true
          Deferred.unsafeDone(started, Effect.succeed([...workers.values()].map((w) => w.process.pid!)))
        }
      })
      worker.on("exit", (code, signal) => {
        const listened = listening.delete(worker.id)
        workers.delete(worker.id)
        if (stopping) {
          if (workers.size === 0) drained()
          return
        }
        const pid = worker.process.pid
        if (!listened) {
          // Its reason is on stderr (inherited): a start that failed once would fail again.
          Deferred.unsafeDone(
            started,
            Effect.fail(new Error(`worker ${pid} ${ended(code, signal)} before it listened`))
          )
          return
        }
        const next = fork()
        runFork(
          Effect.zipRight(
            Metric.increment(workerRestarts),
            Effect.logWarning(
              `proxy: worker ${pid} ${ended(code, signal)}; worker ${next.process.pid} replaces it`
            ).pipe(Effect.annotateLogs({ "proxy.worker": pid, "proxy.workerExit": signal ?? code }))
          )
        )
      })
      return worker
    }
    const stopAll = Effect.async<void>((resume) => {
      // /readyz answers 503 from now; each worker serves on for the drain delay once it has SIGTERM.
      stopping = true
      if (workers.size === 0) return resume(Effect.void)
      const grace = Duration.toMillis(config.shutdownTimeout) +
        (config.admin === undefined ? 0 : Duration.toMillis(config.admin.drainDelay)) + 5_000
      const timer = setTimeout(() => {
        for (const worker of workers.values()) worker.process.kill("SIGKILL")
      }, grace)
      drained = () => {
        clearTimeout(timer)
        resume(Effect.void)
      }
      for (const worker of workers.values()) worker.process.kill("SIGTERM")
    })
    yield* Effect.addFinalizer(() => stopAll)
    for (let i = 0; i < config.workers; i++) fork()
    const pids = yield* Deferred.await(started)
    yield* Console.log(withWorkers(firstBanner!, pids, adminAddress))
    const onHangup = () => {
      for (const worker of workers.values()) worker.process.kill("SIGHUP")
      runFork(Effect.logInfo(`proxy: SIGHUP passed to ${workers.size} workers`))
    }
    yield* Effect.acquireRelease(
      Effect.sync(() => process.on("SIGHUP", onHangup)),
      () => Effect.sync(() => process.off("SIGHUP", onHangup))
    )
    return yield* Effect.never
  }).pipe(Effect.scoped)

/** @internal Why the primary stopped, as one line. */
export const primaryFailure = (cause: Cause.Cause<Error>): string => {
  const error = Cause.squash(cause)
  return error instanceof Error ? error.message : String(error)
}
