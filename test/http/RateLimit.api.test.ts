/**
 * `RateLimit.apiMiddleware` on a real `HttpApi` server on a free port, called by an `HttpApiClient` made
 * from the same API: 20 logins of a burst of 20 pass, the 21st fails with `RateLimitExceeded` whose
 * retry-after is the response's `Retry-After`; the fields on allowed and denied responses; the 429 an RFC 9457
 * problem (validated against its JSON Schema), and in the OpenAPI document on the limited endpoints only, with
 * the fields declared (validated as OpenAPI 3.1, and by the OWASP rate-limit rules); a 413 and a fail-closed 503 as
 * the plain middleware
 * answers them; services read from the request, and the defect when the middleware providing them runs
 * after; a policy per request with two plans and two users; several limits as one.
 */
import * as FetchHttpClient from "@effect/platform/FetchHttpClient"
import * as HttpApi from "@effect/platform/HttpApi"
import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import * as HttpApiClient from "@effect/platform/HttpApiClient"
import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiError from "@effect/platform/HttpApiError"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import * as HttpApiMiddleware from "@effect/platform/HttpApiMiddleware"
import * as HttpApiSecurity from "@effect/platform/HttpApiSecurity"
import * as HttpClient from "@effect/platform/HttpClient"
import type * as HttpClientResponse from "@effect/platform/HttpClientResponse"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as OpenApi from "@effect/platform/OpenApi"
import { describe, expect, it as plain } from "@effect/vitest"
import { Cause, Context, Duration, Effect, Layer, Logger, LogLevel, Metric, Redacted, Schema } from "effect"
import { Capability, FixedWindow, Limits, Rate, Redis, SlidingWindow, TokenBucket } from "wakuwaku"
import { RateLimit } from "wakuwaku/http"
import { forEachBackend } from "../support/backends.js"
import { expectWindowT, fields, get, serve, serveApi } from "../support/http.js"
import { freshNamespace } from "../support/redis.js"
import { owaspRateLimit, problem, sfList, validateOpenApi } from "../support/standards.js"

class LoginLimit extends HttpApiMiddleware.Tag<LoginLimit>()("LoginLimit", {
  failure: RateLimit.RateLimitExceeded
}) {}

class User extends Schema.Class<User>("User")({ id: Schema.String, plan: Schema.Literal("free", "paid") }) {}
class CurrentUser extends Context.Tag("CurrentUser")<CurrentUser, User>() {}

class Authentication extends HttpApiMiddleware.Tag<Authentication>()("Authentication", {
  provides: CurrentUser,
  failure: HttpApiError.Unauthorized,
  security: { token: HttpApiSecurity.bearer }
}) {}

class PlanLimit extends HttpApiMiddleware.Tag<PlanLimit>()("PlanLimit", {
  failure: RateLimit.RateLimitExceeded
}) {}

const api = HttpApi.make("shop")
  // Retry-After, RateLimit and RateLimit-Policy in the OpenAPI document, on the limited operations.
  .annotate(OpenApi.Transform, RateLimit.openApiFields)
  .add(
    HttpApiGroup.make("accounts")
      .add(HttpApiEndpoint.post("login", "/login").addSuccess(Schema.String).middleware(LoginLimit))
      .add(HttpApiEndpoint.get("health", "/health").addSuccess(Schema.String))
  )
  .add(
    // PlanLimit reads the user: Authentication is declared after it, so that it runs first.
    HttpApiGroup.make("orders")
      .add(HttpApiEndpoint.get("list", "/orders").addSuccess(Schema.Array(Schema.String)))
      .middleware(PlanLimit)
      .middleware(Authentication)
  )

const users: Record<string, User> = {
  "token-ann": new User({ id: "ann", plan: "free" }),
  "token-bob": new User({ id: "bob", plan: "paid" })
}

const AuthenticationLive = Layer.succeed(
  Authentication,
  Authentication.of({
    token: (token) => {
      const user = users[Redacted.value(token)]
      return user === undefined ? Effect.fail(new HttpApiError.Unauthorized()) : Effect.succeed(user)
    }
  })
)

const handlers = Layer.mergeAll(
  HttpApiBuilder.group(
    api,
    "accounts",
    (h) => h.handle("login", () => Effect.succeed("welcome")).handle("health", () => Effect.succeed("ok"))
  ),
  HttpApiBuilder.group(api, "orders", (h) => h.handle("list", () => Effect.map(CurrentUser, (u) => [u.id])))
)

/** The API with the two limits' layers, served on a free port; a client of it that keeps the last response. */
const start = <E, R>(limits: Layer.Layer<LoginLimit | PlanLimit, E, R>) =>
  Effect.gen(function*() {
    const { v4 } = yield* serveApi(
      HttpApiBuilder.api(api).pipe(Layer.provide(handlers), Layer.provide(limits), Layer.provide(AuthenticationLive))
    )
    let last: HttpClientResponse.HttpClientResponse | undefined
    const client = yield* HttpApiClient.make(api, {
      baseUrl: v4,
      transformClient: HttpClient.tap((response) => Effect.sync(() => void (last = response)))
    }).pipe(Effect.provide(FetchHttpClient.layer))
    return { client, v4, last: () => last! }
  })

/** Each user's plan: the free one a burst of 3, the paid one of 10, both refilling slowly. */
const plans = () => ({
  free: TokenBucket.make<string>(freshNamespace("free"), 3, Rate.make(1, "100 seconds")),
  paid: TokenBucket.make<string>(freshNamespace("paid"), 10, Rate.make(1, "10 seconds"))
})

const count = (policy: string, decision: RateLimit.Decision) =>
  Effect.map(
    Metric.value(RateLimit.decisions.pipe(Metric.tagged("policy", policy), Metric.tagged("decision", decision))),
    (state) => state.count
  )

const bearer = (token: string) => ({ authorization: `Bearer ${token}` })

const QUOTA_EXCEEDED = "https://iana.org/assignments/http-problem-types#quota-exceeded"

describe("RateLimit.RateLimitExceeded", () => {
  plain("a TaggedError of status 429 whose JSON is an RFC 9457 problem of the draft's quota-exceeded type", () => {
    const error = new RateLimit.RateLimitExceeded({
      policy: "login",
      retryAfter: Duration.seconds(3),
      violatedPolicies: ["login"]
    })
    expect(error._tag).toBe("RateLimitExceeded")
    expect(error.message).toBe("rate limit login exceeded: retry after 3 s")
    const json = JSON.stringify(Schema.encodeSync(RateLimit.RateLimitExceeded)(error))
    // type, title, status and detail; the typed fields as extension members, violated-policies as the draft names it.
    expect(json).toBe(JSON.stringify({
      type: QUOTA_EXCEEDED,
      title: "Quota Exceeded",
      status: 429,
      detail: "The quota of login is spent: retry after 3 s.",
      policy: "login",
      retryAfter: 3,
      "violated-policies": ["login"]
    }))
    expect(problem(json)).toMatchObject({ type: QUOTA_EXCEEDED, status: 429 })
    const back = Schema.decodeUnknownSync(RateLimit.RateLimitExceeded)(JSON.parse(json))
    expect(back).toBeInstanceOf(RateLimit.RateLimitExceeded)
    expect(Duration.toSeconds(back.retryAfter)).toBe(3)
    expect(back).toEqual(error)
  })
})

/** A document's responses of `path` and `method`. */
const responsesOf = (spec: OpenApi.OpenAPISpec, path: string, method: "get" | "post") =>
  (spec.paths[path]![method] as unknown as { responses: Record<string, Record<string, unknown>> }).responses

describe("the OpenAPI document", () => {
  plain(
    "lists the 429, an application/problem+json RateLimitExceeded, on the limited endpoints, and on no other",
    () => {
      const spec = OpenApi.fromApi(api)
      expect(responsesOf(spec, "/login", "post")["429"]).toMatchObject({
        description: "Too Many Requests: a rate limit denied the request; retry after retryAfter seconds",
        content: { "application/problem+json": { schema: { $ref: "#/components/schemas/RateLimitExceeded" } } }
      })
      expect(responsesOf(spec, "/orders", "get")["429"]).toEqual(responsesOf(spec, "/login", "post")["429"])
      expect(responsesOf(spec, "/health", "get")["429"]).toBeUndefined()
      expect(spec.components.schemas["RateLimitExceeded"]).toEqual({
        type: "object",
        required: ["type", "title", "status", "detail", "policy", "retryAfter", "violated-policies"],
        properties: {
          type: { type: "string", enum: [QUOTA_EXCEEDED] },
          title: { type: "string", enum: ["Quota Exceeded"] },
          status: { type: "integer", enum: [429] },
          detail: { type: "string" },
          policy: { $ref: "#/components/schemas/PolicyName" },
          retryAfter: { $ref: "#/components/schemas/RetryAfterSeconds" },
          "violated-policies": { type: "array", items: { $ref: "#/components/schemas/PolicyName" } }
        },
        additionalProperties: false,
        description: "Too Many Requests: a rate limit denied the request; retry after retryAfter seconds"
      })
    }
  )

  plain("bounds the retry: an int64 of whole seconds, at most the longest wait a limiter can ask (10^11 s)", () => {
    const spec = OpenApi.fromApi(api)
    expect(spec.components.schemas["RetryAfterSeconds"]).toEqual({
      type: "integer",
      format: "int64",
      minimum: 0,
      maximum: 100_000_000_000,
      description: "Whole seconds until the request may be retried, as the Retry-After of the response"
    })
    expect(spec.components.schemas["PolicyName"]).toMatchObject({ type: "string", minLength: 1, maxLength: 64 })
    expect(() => Schema.decodeUnknownSync(RateLimit.RetryAfterSeconds)(100_000_000_001)).toThrow()
    expect(Duration.toSeconds(Schema.decodeUnknownSync(RateLimit.RetryAfterSeconds)(100_000_000_000))).toBe(1e11)
  })

  plain(
    "declares Retry-After, RateLimit and RateLimit-Policy on the 429 and the fields on every other 2xx and 4xx",
    () => {
      const spec = OpenApi.fromApi(api)
      for (const [path, method] of [["/login", "post"], ["/orders", "get"]] as const) {
        const responses = responsesOf(spec, path, method)
        const headers = (status: string) => responses[status]!["headers"] as Record<string, Record<string, unknown>>
        expect(Object.keys(headers("429")).sort()).toEqual(["RateLimit", "RateLimit-Policy", "Retry-After"])
        expect(headers("429")["Retry-After"]).toMatchObject({
          required: true,
          schema: { $ref: "#/components/schemas/RetryAfterSeconds" }
        })
        expect(headers("429")["RateLimit"]).toMatchObject({ required: true, schema: { type: "string" } })
        // An allowed request always carries the policy; RateLimit, unless the store failed open.
        expect(headers("200")["RateLimit-Policy"]).toMatchObject({ required: true })
        expect(headers("200")["RateLimit"]).toMatchObject({ required: false })
        expect(headers("400")["RateLimit"]).toMatchObject({ required: false })
      }
      expect(responsesOf(spec, "/health", "get")["200"]!["headers"]).toBeUndefined()
    }
  )

  plain(
    "is valid OpenAPI 3.1 (the OpenAPI Initiative's schema), and the OWASP rate-limit rules find only /health",
    async () => {
      const spec = OpenApi.fromApi(api)
      expect(await validateOpenApi(spec)).toMatchObject({ valid: true })
      // /health has no limit, and so no fields: the rule is right to say so there, and only there.
      expect(owaspRateLimit(spec)).toEqual([
        { code: "owasp:api4:2023-rate-limit", path: "paths /health get responses 200" },
        { code: "owasp:api4:2023-rate-limit", path: "paths /health get responses 400" }
      ])
    }
  )
})

describe("the typed client against a hostile server", () => {
  plain.scoped(
    "a 429 whose body is not a valid RateLimitExceeded is a decoding failure, never a bogus retry",
    () =>
      Effect.gen(function*() {
        const valid = {
          type: QUOTA_EXCEEDED,
          title: "Quota Exceeded",
          status: 429,
          detail: "The quota of login is spent: retry after 3 s.",
          policy: "login",
          retryAfter: 3,
          "violated-policies": ["login"]
        }
        const bodies = [
          { ...valid, retryAfter: -5 },
          { ...valid, retryAfter: 1.5 },
          { ...valid, retryAfter: "3" },
          { ...valid, retryAfter: 100_000_000_001 },
          { ...valid, type: "about:blank" },
          { policy: "login", retryAfter: 3, violatedPolicies: ["login"], _tag: "RateLimitExceeded" }
        ]
        let next = 0
        const { v4 } = yield* serve(
          Effect.sync(() => HttpServerResponse.unsafeJson(bodies[next++ % bodies.length], { status: 429 }))
        )
        const client = yield* HttpApiClient.make(api, { baseUrl: v4 }).pipe(Effect.provide(FetchHttpClient.layer))
        for (let i = 0; i < bodies.length; i++) {
          const error = yield* Effect.flip(client.accounts.login())
          expect(error._tag).toBe("ParseError")
        }
      })
  )
})

forEachBackend("RateLimit.apiMiddleware", (it) => {
  it.scoped("21 calls from an HttpApiClient, burst 20: 20 pass, the 21st fails with RateLimitExceeded", () =>
    Effect.gen(function*() {
      const logins = TokenBucket.make<string>(freshNamespace("login"), 20, Rate.make(1, "3 seconds"))
      const { free, paid } = plans()
      const { client, last } = yield* start(Layer.merge(
        RateLimit.apiMiddleware(LoginLimit, { limiter: logins, onStoreFailure: "fail-closed" }),
        RateLimit.apiMiddleware(PlanLimit, {
          choose: () =>
            Effect.map(CurrentUser, (user) => ({ limiter: user.plan === "paid" ? paid : free, key: user.id })),
          fromRequest: [CurrentUser],
          onStoreFailure: "fail-closed"
        })
      ))
      const policy = `"${logins.namespace}";q=20;w=60`
      for (let i = 1; i <= 20; i++) {
        expect(yield* client.accounts.login()).toBe("welcome")
        expect(last().headers["ratelimit-policy"]).toBe(policy)
        expect(last().headers["ratelimit"]).toBe(`"${logins.namespace}";r=${20 - i};t=${3 * i}`)
      }
      const error = yield* Effect.flip(client.accounts.login())
      expect(error._tag).toBe("RateLimitExceeded")
      if (error._tag !== "RateLimitExceeded") return
      const response = last()
      expect(response.status).toBe(429)
      expect(response.headers["retry-after"]).toBe("3")
      expect(Duration.toSeconds(error.retryAfter)).toBe(Number(response.headers["retry-after"]))
      expect(error.policy).toBe(logins.namespace)
      expect(error.violatedPolicies).toEqual([logins.namespace])
      expect(response.headers["content-type"]).toBe("application/problem+json")
      expect(response.headers["ratelimit-policy"]).toBe(policy)
      expect(response.headers["ratelimit"]).toBe(`"${logins.namespace}";r=0;t=3`)
      expect(sfList(response.headers["ratelimit"])).toEqual([{ name: logins.namespace, params: { r: 0, t: 3 } }])
      // The endpoint without the middleware is not limited and gets no fields.
      expect(yield* client.accounts.health()).toBe("ok")
      expect(last().headers["ratelimit-policy"]).toBeUndefined()
      expect(yield* count(logins.namespace, "allowed")).toBe(20)
      expect(yield* count(logins.namespace, "denied")).toBe(1)
    }))

  it.scoped("a policy per request: two plans, two users; the fields, the metrics and the 429 name the plan", () =>
    Effect.gen(function*() {
      const { free, paid } = plans()
      const logins = TokenBucket.make<string>(freshNamespace("login"), 1, Rate.perSecond(1))
      const { v4 } = yield* start(Layer.merge(
        RateLimit.apiMiddleware(LoginLimit, { limiter: logins, onStoreFailure: "fail-closed" }),
        RateLimit.apiMiddleware(PlanLimit, {
          choose: () =>
            Effect.map(CurrentUser, (user) => ({ limiter: user.plan === "paid" ? paid : free, key: user.id })),
          fromRequest: [CurrentUser],
          onStoreFailure: "fail-closed"
        })
      ))
      const ann = [] as Array<ReturnType<typeof fields>>
      const bob = [] as Array<ReturnType<typeof fields>>
      for (let i = 0; i < 4; i++) ann.push(fields(yield* get(`${v4}/orders`, bearer("token-ann"))))
      for (let i = 0; i < 4; i++) bob.push(fields(yield* get(`${v4}/orders`, bearer("token-bob"))))
      const freePolicy = `"${free.namespace}";q=3;w=300`
      const paidPolicy = `"${paid.namespace}";q=10;w=100`
      expect(ann).toEqual([
        { status: 200, policy: freePolicy, limit: `"${free.namespace}";r=2;t=100`, retryAfter: undefined },
        { status: 200, policy: freePolicy, limit: `"${free.namespace}";r=1;t=200`, retryAfter: undefined },
        { status: 200, policy: freePolicy, limit: `"${free.namespace}";r=0;t=300`, retryAfter: undefined },
        { status: 429, policy: freePolicy, limit: `"${free.namespace}";r=0;t=100`, retryAfter: "100" }
      ])
      expect(bob).toEqual([1, 2, 3, 4].map((i) => ({
        status: 200,
        policy: paidPolicy,
        limit: `"${paid.namespace}";r=${10 - i};t=${10 * i}`,
        retryAfter: undefined
      })))
      const denied = yield* get(`${v4}/orders`, bearer("token-ann"))
      expect(denied.headers["content-type"]).toBe("application/problem+json")
      expect(problem(denied.body)).toEqual({
        type: QUOTA_EXCEEDED,
        title: "Quota Exceeded",
        status: 429,
        detail: `The quota of ${free.namespace} is spent: retry after 100 s.`,
        policy: free.namespace,
        retryAfter: 100,
        "violated-policies": [free.namespace]
      })
      expect([yield* count(free.namespace, "allowed"), yield* count(free.namespace, "denied")]).toEqual([3, 2])
      expect([yield* count(paid.namespace, "allowed"), yield* count(paid.namespace, "denied")]).toEqual([4, 0])
      // An unknown token is the authentication's 401: it ran first, and nothing was spent.
      expect((yield* get(`${v4}/orders`, bearer("nobody"))).status).toBe(401)
    }))

  it.scoped("several limits as one: every policy in RateLimit-Policy, the most restrictive in RateLimit", () =>
    Effect.gen(function*() {
      const burst = TokenBucket.make<string>(freshNamespace("burst"), 5, Rate.make(1, "10 seconds"))
      const hourly = FixedWindow.make<string>(freshNamespace("hourly"), 3, "1 hour")
      const { free, paid } = plans()
      const { client, last } = yield* start(Layer.merge(
        RateLimit.apiMiddleware(LoginLimit, { limiter: [burst, hourly], onStoreFailure: "fail-closed" }),
        RateLimit.apiMiddleware(PlanLimit, {
          choose: () =>
            Effect.map(CurrentUser, (user) => ({ limiter: user.plan === "paid" ? paid : free, key: user.id })),
          fromRequest: [CurrentUser],
          onStoreFailure: "fail-closed"
        })
      ))
      const policy = `"${burst.namespace}";q=5;w=50, "${hourly.namespace}";q=3;w=3600`
      const before = Date.now()
      yield* client.accounts.login()
      const after = Date.now()
      expect(last().headers["ratelimit-policy"]).toBe(policy)
      // burst has 4 left, hourly 2: hourly is the closer to exhaustion; t is what is left of its hour.
      const [item] = sfList(last().headers["ratelimit"])
      expect(item).toMatchObject({ name: hourly.namespace, params: { r: 2 } })
      expectWindowT(item!.params["t"], 3600, before, after)
      yield* client.accounts.login()
      yield* client.accounts.login()
      const error = yield* Effect.flip(client.accounts.login())
      expect(error).toMatchObject({ _tag: "RateLimitExceeded", policy: hourly.namespace })
      expect(last().headers["ratelimit-policy"]).toBe(policy)
      const seconds = Number(last().headers["retry-after"])
      expect(last().headers["ratelimit"]).toBe(`"${hourly.namespace}";r=0;t=${seconds}`)
      // The burst bucket was not spent by the denied call: 2 left of 5.
      expect(yield* burst.peek("127.0.0.1")).toBe(2)
    }))

  it.scoped("a sliding window among several limits: its policy, its t, and its typed 429", () =>
    Effect.gen(function*() {
      const burst = TokenBucket.make<string>(freshNamespace("burst"), 5, Rate.make(1, "10 seconds"))
      const sliding = SlidingWindow.make<string>(freshNamespace("sliding"), 3, "1 hour")
      const { free, paid } = plans()
      const { client, last } = yield* start(Layer.merge(
        RateLimit.apiMiddleware(LoginLimit, { limiter: [burst, sliding], onStoreFailure: "fail-closed" }),
        RateLimit.apiMiddleware(PlanLimit, {
          choose: () =>
            Effect.map(CurrentUser, (user) => ({ limiter: user.plan === "paid" ? paid : free, key: user.id })),
          fromRequest: [CurrentUser],
          onStoreFailure: "fail-closed"
        })
      ))
      const policy = `"${burst.namespace}";q=5;w=50, "${sliding.namespace}";q=3;w=3600`
      yield* client.accounts.login()
      expect(last().headers["ratelimit-policy"]).toBe(policy)
      // The sliding window has 2 left of 3: the closer to exhaustion; whole again an hour after this request.
      expect(sfList(last().headers["ratelimit"])).toEqual([{ name: sliding.namespace, params: { r: 2, t: 3600 } }])
      yield* client.accounts.login()
      yield* client.accounts.login()
      const error = yield* Effect.flip(client.accounts.login())
      expect(error).toMatchObject({ _tag: "RateLimitExceeded", policy: sliding.namespace })
      const seconds = Number(last().headers["retry-after"])
      expect(seconds).toBeGreaterThan(3590)
      expect(seconds).toBeLessThanOrEqual(3600)
      expect(last().headers["ratelimit"]).toBe(`"${sliding.namespace}";r=0;t=${seconds}`)
      expect(yield* burst.peek("127.0.0.1")).toBe(2)
    }))

  it.scoped("a cost above the quota is the plain middleware's 413; fail-closed is its 503", () =>
    Effect.gen(function*() {
      const small = TokenBucket.make<string>(freshNamespace("small"), 2, Rate.perSecond(1))
      const { free, paid } = plans()
      const { v4 } = yield* start(Layer.merge(
        RateLimit.apiMiddleware(LoginLimit, { limiter: small, cost: () => 3, onStoreFailure: "fail-closed" }),
        RateLimit.apiMiddleware(PlanLimit, {
          choose: () =>
            Effect.map(CurrentUser, (user) => ({ limiter: user.plan === "paid" ? paid : free, key: user.id })),
          fromRequest: [CurrentUser],
          onStoreFailure: "fail-closed"
        })
      ))
      const reply = yield* Effect.promise(() => fetch(`${v4}/login`, { method: "POST" }))
      expect(reply.status).toBe(413)
      expect(reply.headers.get("content-type")).toBe("application/problem+json")
      expect(reply.headers.get("ratelimit-policy")).toBe(`"${small.namespace}";q=2;w=2`)
      expect(JSON.parse(yield* Effect.promise(() => reply.text()))).toMatchObject({ status: 413 })
    }))

  it.scoped("the attacker's key: a header over 4096 bytes is the client's 400 problem, not a 500; nothing spent", () =>
    Effect.gen(function*() {
      const perKey = TokenBucket.make<string>(freshNamespace("key"), 5, Rate.perSecond(1))
      const { free, paid } = plans()
      const { v4 } = yield* start(Layer.merge(
        RateLimit.apiMiddleware(LoginLimit, {
          limiter: perKey,
          key: RateLimit.header("x-api-key"),
          onStoreFailure: "fail-closed"
        }),
        RateLimit.apiMiddleware(PlanLimit, {
          choose: () =>
            Effect.map(CurrentUser, (user) => ({ limiter: user.plan === "paid" ? paid : free, key: user.id })),
          fromRequest: [CurrentUser],
          onStoreFailure: "fail-closed"
        })
      ))
      const post = (key: string) =>
        Effect.promise(async () => {
          const response = await fetch(`${v4}/login`, { method: "POST", headers: { "x-api-key": key } })
          return { status: response.status, type: response.headers.get("content-type"), body: await response.text() }
        })
      const reply = yield* post("k".repeat(5000))
      expect(reply.status).toBe(400)
      expect(reply.type).toBe("application/problem+json")
      expect(JSON.parse(reply.body)).toEqual({
        type: "about:blank",
        title: "Bad Request",
        status: 400,
        // The key is `x-api-key=` and the value: 10 + 5000 bytes.
        detail: "a name must encode to at most 4096 bytes, got 5010 (a string)"
      })
      expect((yield* post("k")).status).toBe(200)
      expect(yield* perKey.peek("x-api-key=k")).toBe(4)
    }))

  it.scoped("a store that fails under fail-closed: the plain middleware's 503, outside the API's schema", () =>
    Effect.gen(function*() {
      const logins = TokenBucket.make<string>(freshNamespace("login"), 2, Rate.perSecond(1))
      const { free, paid } = plans()
      const { client, last } = yield* start(Layer.merge(
        RateLimit.apiMiddleware(LoginLimit, { limiter: logins, onStoreFailure: "fail-closed" }).pipe(
          Layer.provide(Layer.merge(Layer.succeed(Redis.Redis, failing), Capability.ReadWrite))
        ),
        RateLimit.apiMiddleware(PlanLimit, {
          choose: () =>
            Effect.map(CurrentUser, (user) => ({ limiter: user.plan === "paid" ? paid : free, key: user.id })),
          fromRequest: [CurrentUser],
          onStoreFailure: "fail-closed"
        })
      ))
      const error = yield* Effect.flip(client.accounts.login())
      // A status the API does not declare: the client cannot decode it.
      expect(error).toMatchObject({ _tag: "ResponseError", reason: "Decode" })
      expect(last().status).toBe(503)
      expect(last().headers["content-type"]).toBe("application/problem+json")
      expect(last().headers["ratelimit-policy"]).toBe(`"${logins.namespace}";q=2;w=2`)
    }).pipe(Logger.withMinimumLogLevel(LogLevel.None)))

  it.scoped("fromRequest: a service the middleware declared after this one provides is a defect naming the order", () =>
    Effect.gen(function*() {
      const wrong = HttpApi.make("wrong").add(
        HttpApiGroup.make("orders")
          .add(HttpApiEndpoint.get("list", "/orders").addSuccess(Schema.Array(Schema.String)))
          .middleware(Authentication)
          .middleware(PlanLimit)
      )
      const { free, paid } = plans()
      const defects: Array<string> = []
      const logger = Logger.make(({ cause }) => {
        if (Cause.isDie(cause)) defects.push(Cause.pretty(cause))
      })
      const { v4 } = yield* serveApi(
        HttpApiBuilder.api(wrong).pipe(
          Layer.provide(
            HttpApiBuilder.group(wrong, "orders", (h) => h.handle("list", () => Effect.map(CurrentUser, (u) => [u.id])))
          ),
          Layer.provide(RateLimit.apiMiddleware(PlanLimit, {
            choose: () =>
              Effect.map(CurrentUser, (user) => ({ limiter: user.plan === "paid" ? paid : free, key: user.id })),
            fromRequest: [CurrentUser],
            onStoreFailure: "fail-closed"
          })),
          Layer.provide(AuthenticationLive)
        ),
        true
      ).pipe(Effect.provide(Logger.replace(Logger.defaultLogger, logger)))
      expect((yield* get(`${v4}/orders`, bearer("token-ann"))).status).toBe(500)
      expect(defects.join("\n")).toContain(
        "RateLimit.apiMiddleware(PlanLimit): CurrentUser, which the key, the cost or choose reads from the request, " +
          "is not there. The HttpApi middleware that provides it must run first: declare it after PlanLimit"
      )
    }))

  it.scoped("a shadow limit in the list: never denies, never named in the fields, counted when it would deny", () =>
    Effect.gen(function*() {
      const logins = TokenBucket.make<string>(freshNamespace("login"), 20, Rate.make(1, "3 seconds"))
      const strict = TokenBucket.make<string>(freshNamespace("strict"), 2, Rate.make(1, "1000 seconds"))
      const { free, paid } = plans()
      const { client, last } = yield* start(Layer.merge(
        RateLimit.apiMiddleware(LoginLimit, {
          limiter: [logins, RateLimit.shadow(strict)],
          onStoreFailure: "fail-closed"
        }),
        RateLimit.apiMiddleware(PlanLimit, {
          choose: () =>
            Effect.map(CurrentUser, (user) => ({ limiter: user.plan === "paid" ? paid : free, key: user.id })),
          fromRequest: [CurrentUser],
          onStoreFailure: "fail-closed"
        })
      ))
      const wouldDeny = Effect.map(
        Metric.value(Limits.wouldDenyCounter.pipe(Metric.tagged("policy", strict.namespace))),
        (state) => state.count
      )
      const before = yield* wouldDeny
      for (let i = 1; i <= 4; i++) {
        expect(yield* client.accounts.login()).toBe("welcome")
        expect(last().headers["ratelimit-policy"]).toBe(`"${logins.namespace}";q=20;w=60`)
        expect(last().headers["ratelimit"]).toBe(`"${logins.namespace}";r=${20 - i};t=${3 * i}`)
      }
      // The strict bucket allowed two and would have denied the two others: it spent only the two.
      expect(yield* wouldDeny).toBe(before + 2)
      expect([yield* logins.peek("127.0.0.1"), yield* strict.peek("127.0.0.1")]).toEqual([16, 0])
    }))
})

/** A store that is down: every call fails, as a connection refused would. */
const failing: Redis.Service = {
  [Redis.TypeId]: Redis.TypeId,
  script: () => Effect.fail(new Redis.RedisError({ reason: "Connection", operation: "test", cause: "down" })),
  command: () => Effect.fail(new Redis.RedisError({ reason: "Connection", operation: "test", cause: "down" })),
  dedicated: () => Effect.dieMessage("unused")
}
