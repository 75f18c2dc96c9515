/**
 * `wakuwaku/http`: rate limiting for `@effect/platform` HTTP servers, backed by the structures of
 * `wakuwaku`. Reachable by this subpath only, so the core never loads `@effect/platform`.
 *
 * - {@link RateLimit}: the middleware of an `HttpApp`, and `RateLimit.apiMiddleware`, the implementation of
 *   an `HttpApi` middleware whose 429 (`RateLimit.RateLimitExceeded`) the API, its OpenAPI and its client know.
 * - {@link ClientIp}: which address a request comes from, with trusted proxies.
 *
 * @since 0.1.0
 */

/** @since 0.1.0 */
export * as ClientIp from "./ClientIp.js"

/** @since 0.1.0 */
export * as RateLimit from "./RateLimit.js"
