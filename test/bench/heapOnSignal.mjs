/* global process */
// Preloaded into a server by proxyDelay.ts (`node --expose-gc --import ./test/bench/heapOnSignal.mjs …`): on
// SIGUSR2, a full garbage collection, then one line on stderr, `heap-after-gc <n> <heapUsed> <rss>` (bytes; n counts
// the signals from 1), so that the bench reads what the process keeps alive, garbage aside. Nothing per request.
let n = 0
process.on("SIGUSR2", () => {
  n++
  globalThis.gc()
  const { heapUsed, rss } = process.memoryUsage()
  process.stderr.write(`heap-after-gc ${n} ${heapUsed} ${rss}\n`)
})
