/**
 * wakuwaku: typed Redis structures for Effect.
 *
 * @since 0.1.0
 */

/** @since 0.1.0 */
export * as Admission from "./Admission.js"

/** @since 0.1.0 */
export * as Capability from "./Capability.js"

/** @since 0.1.0 */
export * as FixedWindow from "./FixedWindow.js"

/** @since 0.1.0 */
export * as Limiter from "./Limiter.js"

/** @since 0.1.0 */
export * as Lock from "./Lock.js"

/** @since 0.1.0 */
export * as Pipe from "./Pipe.js"

/** @since 0.1.0 */
export * as Rate from "./Rate.js"

/** @since 0.1.0 */
export * as Redis from "./Redis.js"

/** @since 0.1.0 */
export * as Script from "./Script.js"

/** @since 0.1.0 */
export * as SlidingWindow from "./SlidingWindow.js"

/** @since 0.1.0 */
export * as TokenBucket from "./TokenBucket.js"

/** @since 0.1.0 */
export * as RwLock from "./RwLock.js"

/** @since 0.1.0 */
export * as Semaphore from "./Semaphore.js"

/** @since 0.2.0 */
export * as Limits from "./Limits.js"
/** @since 0.1.0 */
export * as Telemetry from "./Telemetry.js"
