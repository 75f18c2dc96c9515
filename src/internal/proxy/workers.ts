/**
 * @internal `wakuwaku proxy --workers N|auto`: N processes serving one port (node:cluster), sharing their limits
 * through Redis.
 *
 * - **The primary** forks the workers (each runs the same command line and listens on the same port, which the
 *   primary holds and hands connections out from, round-robin), prints the banner once every worker listens,
 *   and passes on SIGHUP (each worker reads the configuration file again: ./reload.ts) and SIGINT/SIGTERM (each
 *   drains as one process does, within `--shutdown-timeout`); it exits once they all have.
 * - **A worker that dies is replaced**, and the event logged with its exit code or signal. A worker that dies
 *   before it ever listened ends the proxy instead (its reason is on stderr): a start that fails would fail again.
 * - **Limits are shared through Redis.** With the embedded store each worker would keep limits of its own, so
 *   a client would get N times its limit: the command line refuses `--workers` above 1 without `--redis`
 *   (./cli.ts).
 */
import * as Cause from "effect/Cause"
import * as Console from "effect/Console"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Runtime from "effect/Runtime"
import Cluster from "node:cluster"
import type { Worker } from "node:cluster"
import type { Config } from "./cli.js"

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

/** The banner of the workers: the first worker's, with a line naming them. */
const withWorkers = (banner: string, pids: ReadonlyArray<number>): string => {
  const lines = banner.split("\n")
  const at = lines.findIndex((line) => line.startsWith("  store:"))
  lines.splice(at + 1, 0, `  workers:  ${pids.length} processes (${pids.join(", ")}), sharing the port and the store`)
  return lines.join("\n")
}

/**
 * @internal The primary of `--workers`: forks `config.workers` workers, prints the banner once they all listen,
 * passes SIGHUP on, replaces a worker that dies, and on interruption (SIGINT/SIGTERM under `runMain`) passes
 * SIGTERM on and waits for every worker to exit (SIGKILL past the shutdown timeout and 5 s more).
 */
export const primary = (config: Config): Effect.Effect<never, Error> =>
  Effect.gen(function*() {
    const runFork = Runtime.runFork(yield* Effect.runtime<never>())
    const workers = new Map<number, Worker>()
    const started = yield* Deferred.make<string, Error>()
    let stopping = false
    /** Called once the last worker has exited, while stopping. */
    let drained = () => {}
    let firstBanner: string | undefined
    let ready = 0
    const fork = (): Worker => {
      const worker = Cluster.fork()
      let listened = false
      workers.set(worker.id, worker)
      worker.on("message", (message: unknown) => {
        if (!isListening(message) || listened) return
        listened = true
        if (firstBanner !== undefined && ready >= config.workers) {
          runFork(Effect.logInfo(`proxy: worker ${worker.process.pid} listens`))
          return
        }
        firstBanner ??= message.banner
        if (++ready === config.workers) {
          Deferred.unsafeDone(
            started,
            Effect.succeed(withWorkers(firstBanner, [...workers.values()].map((w) => w.process.pid!)))
          )
        }
      })
      worker.on("exit", (code, signal) => {
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
          Effect.logWarning(
            `proxy: worker ${pid} ${ended(code, signal)}; worker ${next.process.pid} replaces it`
          ).pipe(Effect.annotateLogs({ "proxy.worker": pid, "proxy.workerExit": signal ?? code }))
        )
      })
      return worker
    }
    const stopAll = Effect.async<void>((resume) => {
      stopping = true
      if (workers.size === 0) return resume(Effect.void)
      const grace = Duration.toMillis(config.shutdownTimeout) + 5_000
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
    const banner = yield* Deferred.await(started)
    yield* Console.log(banner)
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
