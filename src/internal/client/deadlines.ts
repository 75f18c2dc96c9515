/** @internal Command deadlines of the Redis service. */

/**
 * @internal Command deadlines, kept by the service rather than by ioredis (whose `commandTimeout` arms a
 * timer per command, batched or not): one Node timer per request the service sends, which for batched
 * scripts is one per batch. Node keeps the timers of one duration in one list, so arming and clearing
 * are constant time. A queue of deadlines swept by one interval cost CPU per batched acquire, nearly all of
 * it garbage collection (the requests it referenced survived young-generation collections), where a timer
 * per request costs next to nothing (docs/performance.md, "Figures behind design choices").
 */
export class Deadlines {
  constructor(readonly timeout: number) {}
  /** Arms the deadline of one request: `expire` runs once `timeout` ms have passed, unless it is answered. */
  track(expire: () => void): ReturnType<typeof setTimeout> {
    const timer = setTimeout(expire, this.timeout)
    // A request waiting for its reply does not by itself keep the process alive.
    timer.unref()
    return timer
  }
  /** The request was answered. */
  untrack(timer: ReturnType<typeof setTimeout>) {
    clearTimeout(timer)
  }
}
