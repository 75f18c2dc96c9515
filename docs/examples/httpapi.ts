/**
 * Rate limits declared on an `HttpApi` (`npx tsx docs/examples/httpapi.ts`; `--openapi` prints the API's
 * OpenAPI document instead, which docs/httpapi.openapi.json holds).
 *
 * - `POST /login` is limited per client address: bursts of 20, one more every 3 seconds (`LoginLimit`).
 * - `GET /orders` needs a bearer token; its limit is the user's plan, 100 an hour on the free plan, 10 000
 *   on the paid one, and for everyone at most 10 a second, all decided as one (`PlanLimit`).
 * - `GET /health` is not limited.
 *
 * The program serves the API on a free port, then calls it with a client made from the same API: 21
 * logins (the 21st fails with `RateLimitExceeded`, retry after 3 s, as `Retry-After` says), an order each
 * for Ann (free) and Bob (paid), whose fields list their plan and the per-second limit (the closer to
 * exhaustion in `RateLimit`), and one with a wrong token (Unauthorized, before any limit is asked). The
 * store: the Redis at `REDIS_URL` when it is set, else the embedded memory backend.
 */
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
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
import * as HttpServer from "@effect/platform/HttpServer"
import * as OpenApi from "@effect/platform/OpenApi"
import { Config, Console, Context, Duration, Effect, Layer, Option, Redacted, Schema } from "effect"
import { createServer } from "node:http"
import { pathToFileURL } from "node:url"
import { FixedWindow, Rate, Redis, TokenBucket } from "wakuwaku"
import { RateLimit } from "wakuwaku/http"

// The limits.

/** Bursts of 20 logins per address, one more every 3 seconds. */
export const LOGINS = TokenBucket.make<string>("login", 20, Rate.make(1, "3 seconds"))
/** At most 10 a second for everyone, whatever the plan. */
export const PER_SECOND = TokenBucket.make<string>("per-second", 10, Rate.perSecond(10))
/** The plans: requests an hour. */
export const PLANS = {
  free: FixedWindow.make<string>("free", 100, "1 hour"),
  paid: FixedWindow.make<string>("paid", 10_000, "1 hour")
}

// The API: the middlewares are declared with platform's own HttpApiMiddleware.Tag.

export class User extends Schema.Class<User>("User")({ id: Schema.String, plan: Schema.Literal("free", "paid") }) {}
export class CurrentUser extends Context.Tag("CurrentUser")<CurrentUser, User>() {}

export class Authentication extends HttpApiMiddleware.Tag<Authentication>()("Authentication", {
  provides: CurrentUser,
  failure: HttpApiError.Unauthorized,
  security: { bearer: HttpApiSecurity.bearer }
}) {}

export class LoginLimit extends HttpApiMiddleware.Tag<LoginLimit>()("LoginLimit", {
  failure: RateLimit.RateLimitExceeded
}) {}

export class PlanLimit extends HttpApiMiddleware.Tag<PlanLimit>()("PlanLimit", {
  failure: RateLimit.RateLimitExceeded
}) {}

export const api = HttpApi.make("shop")
  .annotate(OpenApi.Title, "Shop, the wakuwaku/http example (docs/examples/httpapi.ts)")
  // Retry-After, RateLimit and RateLimit-Policy, declared on the limited operations' responses.
  .annotate(OpenApi.Transform, RateLimit.openApiFields)
  .add(
    HttpApiGroup.make("accounts")
      .add(HttpApiEndpoint.post("login", "/login").addSuccess(Schema.String).middleware(LoginLimit))
      .add(HttpApiEndpoint.get("health", "/health").addSuccess(Schema.String))
  )
  .add(
    HttpApiGroup.make("orders")
      .add(HttpApiEndpoint.get("list", "/orders").addSuccess(Schema.Array(Schema.String)))
      // PlanLimit reads the user, so Authentication must run first: platform runs the last declared first.
      .middleware(PlanLimit)
      .middleware(Authentication)
  )

// The implementations.

export const LoginLimitLive = RateLimit.apiMiddleware(LoginLimit, {
  limiter: LOGINS,
  key: RateLimit.clientIp(),
  onStoreFailure: "fail-closed"
})

export const PlanLimitLive = RateLimit.apiMiddleware(PlanLimit, {
  // The user's plan and 10 a second, decided as one: a request either denies spends from neither.
  choose: () => Effect.map(CurrentUser, (user) => ({ limiter: [PER_SECOND, PLANS[user.plan]] as const, key: user.id })),
  // The user is the request's, provided by Authentication: the layer does not ask for one.
  fromRequest: [CurrentUser],
  onStoreFailure: RateLimit.fallback({ maxEntries: 10_000 })
})

const tokens: Record<string, User> = {
  "ann-token": new User({ id: "ann", plan: "free" }),
  "bob-token": new User({ id: "bob", plan: "paid" })
}

export const AuthenticationLive = Layer.succeed(
  Authentication,
  Authentication.of({
    bearer: (token) =>
      Option.match(Option.fromNullable(tokens[Redacted.value(token)]), {
        onNone: () => Effect.fail(new HttpApiError.Unauthorized()),
        onSome: Effect.succeed
      })
  })
)

const AccountsLive = HttpApiBuilder.group(
  api,
  "accounts",
  (handlers) => handlers.handle("login", () => Effect.succeed("welcome")).handle("health", () => Effect.succeed("ok"))
)
const OrdersLive = HttpApiBuilder.group(
  api,
  "orders",
  (handlers) => handlers.handle("list", () => Effect.map(CurrentUser, (user) => [`order of ${user.id}`]))
)

/** The API with its handlers and middlewares: needs `Redis | Write<TokenBucket.Entity> | Write<FixedWindow.Entity>`. */
export const ApiLive = HttpApiBuilder.api(api).pipe(
  Layer.provide([AccountsLive, OrdersLive]),
  Layer.provide([LoginLimitLive, PlanLimitLive, AuthenticationLive])
)

// The program: serve on a free port, call with a client of the same API.

const store = Layer.unwrapEffect(
  Effect.gen(function*() {
    const url = yield* Config.option(Config.nonEmptyString("REDIS_URL"))
    if (Option.isSome(url)) {
      yield* Console.log(`store: Redis at ${url.value} (REDIS_URL)`)
      return Redis.layer({ url: url.value })
    }
    yield* Console.log("store: memory (no REDIS_URL): shared by nothing but this process")
    return Redis.layerMemory()
  })
)

const fieldsOf = (response: HttpClientResponse.HttpClientResponse) =>
  `RateLimit: ${response.headers["ratelimit"]}${
    response.headers["retry-after"] === undefined ? "" : `, Retry-After: ${response.headers["retry-after"]}`
  }`

const program = Effect.gen(function*() {
  const address = (yield* HttpServer.HttpServer).address
  if (address._tag !== "TcpAddress") return yield* Effect.dieMessage("expected a TCP address")
  let last: HttpClientResponse.HttpClientResponse | undefined
  const client = (token?: string) =>
    HttpApiClient.make(api, {
      baseUrl: `http://127.0.0.1:${address.port}`,
      transformClient: (client) =>
        client.pipe(
          HttpClient.mapRequest((request) =>
            token === undefined
              ? request
              : { ...request, headers: { ...request.headers, authorization: `Bearer ${token}` } }
          ),
          HttpClient.tap((response) => Effect.sync(() => void (last = response)))
        )
    })

  const anonymous = yield* client()
  for (let attempt = 1; attempt <= 21; attempt++) {
    const outcome = yield* Effect.either(anonymous.accounts.login())
    yield* Console.log(
      outcome._tag === "Right"
        ? `login ${attempt}: ${outcome.right} (${fieldsOf(last!)})`
        : outcome.left._tag === "RateLimitExceeded"
        ? `login ${attempt}: RateLimitExceeded by ${outcome.left.policy}, retry after ${
          Duration.toSeconds(outcome.left.retryAfter)
        } s (${fieldsOf(last!)})`
        : `login ${attempt}: ${outcome.left._tag}`
    )
  }
  for (const token of ["ann-token", "bob-token"]) {
    const orders = yield* (yield* client(token)).orders.list()
    yield* Console.log(
      `${orders.join(", ")}: RateLimit-Policy: ${last!.headers["ratelimit-policy"]} (${fieldsOf(last!)})`
    )
  }
  const stranger = yield* Effect.either((yield* client("wrong-token")).orders.list())
  yield* Console.log(`a wrong token: ${stranger._tag === "Left" ? stranger.left._tag : "passed"}`)
})

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  if (process.argv.includes("--openapi")) {
    console.log(JSON.stringify(OpenApi.fromApi(api), null, 2))
  } else {
    program.pipe(
      Effect.provide(
        HttpApiBuilder.serve().pipe(
          Layer.provide(ApiLive),
          Layer.provideMerge(NodeHttpServer.layer(() => createServer(), { port: 0, host: "127.0.0.1" }))
        )
      ),
      Effect.provide(store),
      Effect.provide(FetchHttpClient.layer),
      Effect.runPromise
    ).then(
      () => process.exit(0),
      (error) => {
        console.error(String(error))
        process.exit(1)
      }
    )
  }
}
