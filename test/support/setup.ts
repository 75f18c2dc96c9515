/**
 * Run before every test file (vitest's `setupFiles`). Test files share their worker's modules
 * (`isolate: false` in vitest.config.ts), and @effect/vitest's `layer(…)` assigns its own `effect`,
 * `scoped`… onto the one `it` object that every file imports: after a file's `forEachBackend`, the next
 * file's `it.effect` would run on that file's last layer, without TestClock. Each file starts with the
 * methods the package exports.
 */
import { effect, flakyTest, it, layer, live, prop, scoped, scopedLive } from "@effect/vitest"

Object.assign(it, { effect, scoped, live, scopedLive, flakyTest, layer, prop })
