import { fileURLToPath } from "node:url"
import { defineConfig } from "vitest/config"
import { BaseSequencer, type TestSpecification } from "vitest/node"

/**
 * The files that take longest from start to end (a packed install, child processes waiting out leases),
 * started first, longest first: started last, any one of them would finish alone after the rest of the run.
 * A file not named keeps vitest's own order after them.
 */
const LONGEST = [
  "test/package.test.ts",
  "test/Pipe.processes.test.ts",
  "test/cli.test.ts",
  "test/Pipe.test.ts",
  "test/docs.test.ts",
  "test/examples.test.ts",
  "test/Faults.test.ts",
  "test/Proxy.attacks.test.ts",
  "test/differential.test.ts"
]

class LongestFirst extends BaseSequencer {
  override async sort(files: Array<TestSpecification>): Promise<Array<TestSpecification>> {
    const sorted = await super.sort(files)
    const rank = (file: TestSpecification) => {
      const at = LONGEST.findIndex((name) => file.moduleId.endsWith(name))
      return at === -1 ? LONGEST.length : at
    }
    return sorted.map((file, i) => ({ file, i })).sort((a, b) => rank(a.file) - rank(b.file) || a.i - b.i)
      .map(({ file }) => file)
  }
}

export default defineConfig({
  resolve: {
    alias: [
      { find: /^wakuwaku$/, replacement: fileURLToPath(new URL("./src/index.ts", import.meta.url)) },
      { find: /^wakuwaku\/(.*)$/, replacement: fileURLToPath(new URL("./src/$1.ts", import.meta.url)) }
    ]
  },
  test: {
    include: ["test/**/*.test.ts"],
    globalSetup: ["test/support/globalSetup.ts"],
    // A worker keeps its modules from one test file to the next (effect, ioredis, src/ are loaded once per
    // worker, not once per file): the run took 484 s of CPU isolated, 345–402 s not (2026-12-04). What the
    // files share is reset before each (support/setup.ts); each test makes its own namespaces and layers.
    isolate: false,
    setupFiles: ["test/support/setup.ts"],
    // Many files wait on servers and child processes, not on this process's CPU: vitest's default of one
    // worker per core but one (a single worker on 2 cores) ran them one after another. Two files hold a worker
    // for two minutes while their child processes compile (package.test.ts, docs.test.ts): a 4th worker keeps
    // two running beside them (3 workers: 3 min 59 s–4 min 5 s in the work tree; 4: 3 min 47 s, 2026-12-05).
    maxWorkers: 4,
    // Worker threads, not forked processes: a test file starts on less CPU (12 light files: 38 s of CPU
    // against 46 s forked, 2026-12-02), and the run is CPU-bound. Nothing here needs a process of its own
    // (no chdir, no signal handlers, no process.exit in a test): the children the tests start are processes.
    pool: "threads",
    sequence: { sequencer: LongestFirst },
    // As many as maxWorkers: with fewer, tinypool retires a worker that idles, and with `isolate: false` it
    // once did so under a file it had just been given ("Terminating worker thread", the file never ran).
    minWorkers: 4,
    testTimeout: 30_000,
    hookTimeout: 30_000
  }
})
