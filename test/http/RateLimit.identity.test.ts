/**
 * Client identity over real sockets: which bucket a request lands in, read back as the exact keys the
 * limiter wrote, on Redis and on the memory backend.
 */
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { describe, expect, it as plain } from "@effect/vitest"
import { Effect } from "effect"
import { Rate, TokenBucket } from "wakuwaku"
import { RateLimit } from "wakuwaku/http"
import * as Proxy from "wakuwaku/Proxy"
import { forEachBackend, keysMatching } from "../support/backends.js"
import { get, serve } from "../support/http.js"
import { freshNamespace } from "../support/redis.js"

const hello = Effect.succeed(HttpServerResponse.text("hello"))

/** A bucket of one request per 100 s: a second request to the same key is denied. */
const oneShot = () => TokenBucket.make<string>(freshNamespace(), 1, Rate.make(1, "100 seconds"))

/** The names that hold a bucket, sorted. */
const names = (limiter: TokenBucket.TokenBucket<string>) =>
  Effect.map(
    keysMatching(`@@wakuwaku:TokenBucket:${limiter.namespace}:*`),
    (keys) => keys.map((key) => key.slice(`@@wakuwaku:TokenBucket:${limiter.namespace}:`.length)).sort()
  )

const loopback = ["127.0.0.1", "::1"]

describe("header keys", () => {
  plain("a header name that is not a token (RFC 9110 §5.1) is refused when the key is made", () => {
    expect(() => RateLimit.header("x-api=key")).toThrow(
      new TypeError("wakuwaku/http: a header name must be a token (RFC 9110 §5.1), got \"x-api=key\"")
    )
    expect(() => RateLimit.header("")).toThrow(TypeError)
    expect(() => Proxy.header("x api")).toThrow(TypeError)
  })
})

forEachBackend("RateLimit client identity", (it) => {
  it.scoped("no trust configured: X-Forwarded-For is ignored, the socket address keys", () =>
    Effect.gen(function*() {
      const limiter = oneShot()
      const { v4, v6 } = yield* serve(RateLimit.middleware({ limiter, onStoreFailure: "fail-closed" })(hello))
      expect((yield* get(v4, { "x-forwarded-for": "203.0.113.1" })).status).toBe(200)
      // Another spoofed address does not get another bucket.
      expect((yield* get(v4, { "x-forwarded-for": "203.0.113.2" })).status).toBe(429)
      expect((yield* get(v4, { forwarded: "for=203.0.113.3" })).status).toBe(429)
      // The IPv6 loopback is another client, keyed by its /56.
      expect((yield* get(v6, { "x-forwarded-for": "203.0.113.1" })).status).toBe(200)
      expect(yield* names(limiter)).toEqual(["127.0.0.1", "::/56"])
    }))

  it.scoped("trusted proxies by CIDR: the rightmost untrusted address keys, spoofed entries left of it do not", () =>
    Effect.gen(function*() {
      const limiter = oneShot()
      const key = RateLimit.clientIp({ trustedProxies: loopback })
      const { v4, v6 } = yield* serve(RateLimit.middleware({ limiter, key, onStoreFailure: "fail-closed" })(hello))
      expect((yield* get(v4, { "x-forwarded-for": "1.1.1.1, 203.0.113.7" })).status).toBe(200)
      expect((yield* get(v6, { "x-forwarded-for": "9.9.9.9, 203.0.113.7" })).status).toBe(429)
      expect((yield* get(v4, { "x-forwarded-for": "203.0.113.7, 127.0.0.1" })).status).toBe(429)
      expect((yield* get(v4, { "x-forwarded-for": "203.0.113.8" })).status).toBe(200)
      // A trusted socket with no header is keyed itself.
      expect((yield* get(v4)).status).toBe(200)
      expect(yield* names(limiter)).toEqual(["127.0.0.1", "203.0.113.7", "203.0.113.8"])
    }))

  it.scoped("IPv6 clients are keyed by their /56, or the prefix configured", () =>
    Effect.gen(function*() {
      const by56 = oneShot()
      const by64 = oneShot()
      const app = RateLimit.middleware({
        limiter: by64,
        key: RateLimit.clientIp({ trustedProxies: loopback, ipv6Prefix: 64 }),
        onStoreFailure: "fail-closed"
      })(hello)
      const { v4 } = yield* serve(app)
      const { v4: v4By56 } = yield* serve(
        RateLimit.middleware({
          limiter: by56,
          key: RateLimit.clientIp({ trustedProxies: loopback }),
          onStoreFailure: "fail-closed"
        })(
          hello
        )
      )
      expect((yield* get(v4By56, { "x-forwarded-for": "2001:db8:0:1::1" })).status).toBe(200)
      expect((yield* get(v4By56, { "x-forwarded-for": "2001:db8:0:2::2" })).status).toBe(429)
      expect((yield* get(v4By56, { "x-forwarded-for": "2001:db8:0:100::1" })).status).toBe(200)
      expect((yield* get(v4By56, { "x-forwarded-for": "::ffff:203.0.113.9" })).status).toBe(200)
      expect(yield* names(by56)).toEqual(["2001:db8:0:100::/56", "2001:db8::/56", "203.0.113.9"])

      expect((yield* get(v4, { "x-forwarded-for": "2001:db8:0:1::1" })).status).toBe(200)
      expect((yield* get(v4, { "x-forwarded-for": "2001:db8:0:1::2" })).status).toBe(429)
      expect((yield* get(v4, { "x-forwarded-for": "2001:db8:0:2::2" })).status).toBe(200)
      expect(yield* names(by64)).toEqual(["2001:db8:0:1::/64", "2001:db8:0:2::/64"])
    }))

  it.scoped("a hop count, and Forwarded when the proxies maintain it", () =>
    Effect.gen(function*() {
      const byHops = oneShot()
      const byForwarded = oneShot()
      const { v4: hops } = yield* serve(
        RateLimit.middleware({
          limiter: byHops,
          key: RateLimit.clientIp({ trustedProxies: 1 }),
          onStoreFailure: "fail-closed"
        })(
          hello
        )
      )
      const { v4: fwd } = yield* serve(
        RateLimit.middleware({
          limiter: byForwarded,
          key: RateLimit.clientIp({ trustedProxies: loopback, header: "forwarded" }),
          onStoreFailure: "fail-closed"
        })(hello)
      )
      expect((yield* get(hops, { "x-forwarded-for": "1.1.1.1, 203.0.113.7" })).status).toBe(200)
      expect((yield* get(hops, { "x-forwarded-for": "2.2.2.2, 203.0.113.7" })).status).toBe(429)
      expect(yield* names(byHops)).toEqual(["203.0.113.7"])

      expect((yield* get(fwd, { forwarded: "for=\"[2001:db8::1]:1234\";proto=https" })).status).toBe(200)
      // Forwarded is the header here: X-Forwarded-For is the client's own.
      expect((yield* get(fwd, { "x-forwarded-for": "198.51.100.1" })).status).toBe(200)
      expect(yield* names(byForwarded)).toEqual(["127.0.0.1", "2001:db8::/56"])
    }))

  it.scoped("custom keys: a header (falling back to the client IP), or a function of the request", () =>
    Effect.gen(function*() {
      const byHeader = oneShot()
      const byFunction = oneShot()
      const { v4: header } = yield* serve(
        RateLimit.middleware({ limiter: byHeader, key: RateLimit.header("x-api-key"), onStoreFailure: "fail-closed" })(
          hello
        )
      )
      const { v4: fn } = yield* serve(
        RateLimit.middleware({
          limiter: byFunction,
          key: (request) => Effect.succeed(`tenant:${request.headers["x-tenant"] ?? "none"}`),
          onStoreFailure: "fail-closed"
        })(hello)
      )
      expect((yield* get(header, { "x-api-key": "k1" })).status).toBe(200)
      expect((yield* get(header, { "x-api-key": "k1" })).status).toBe(429)
      expect((yield* get(header, { "x-api-key": "k2" })).status).toBe(200)
      expect((yield* get(header)).status).toBe(200)
      // A header's keys are `<name>=<value>`, apart from every address key.
      expect(yield* names(byHeader)).toEqual(["127.0.0.1", "x-api-key=k1", "x-api-key=k2"])

      expect((yield* get(fn, { "x-tenant": "acme" })).status).toBe(200)
      expect((yield* get(fn, { "x-tenant": "acme" })).status).toBe(429)
      expect(yield* names(byFunction)).toEqual(["tenant:acme"])
    }))

  it.scoped("an attacker's header equal to a victim's address does not touch the victim's bucket", () =>
    Effect.gen(function*() {
      const limiter = oneShot()
      const { v4, v6 } = yield* serve(
        RateLimit.middleware({ limiter, key: RateLimit.header("X-Api-Key"), onStoreFailure: "fail-closed" })(hello)
      )
      // The attacker, at ::1, sends the victim's address (127.0.0.1) as its key, and spends its own bucket.
      expect((yield* get(v6, { "x-api-key": "127.0.0.1" })).status).toBe(200)
      expect((yield* get(v6, { "x-api-key": "127.0.0.1" })).status).toBe(429)
      // The victim, at 127.0.0.1 with no header, is keyed by its address: its bucket is untouched.
      expect((yield* get(v4)).status).toBe(200)
      expect((yield* get(v4)).status).toBe(429)
      expect(yield* names(limiter)).toEqual(["127.0.0.1", "x-api-key=127.0.0.1"])
    }))
})
