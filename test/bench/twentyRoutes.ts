/**
 * The twenty routes of the benchmarks, as a service's file might list them (methods, hosts, exact paths, prefixes,
 * `*` segments): matched in process by routes.ts, and served by `wakuwaku proxy --config` in proxy.ts, where a
 * request for {@link LAST_PATH} goes through the nineteen others before it takes the last.
 */

/** A route's match, as the configuration file and the router take it. */
export interface Match {
  readonly methods?: ReadonlyArray<string> | undefined
  readonly host?: string | undefined
  readonly path?: string | undefined
  readonly prefix?: string | undefined
}

export interface Route {
  readonly name: string
  readonly match: Match
}

/** 20 routes, as a service's file might list them. */
export const TWENTY: ReadonlyArray<Route> = [
  { name: "login", match: { methods: ["POST"], path: "/login" } },
  { name: "logout", match: { methods: ["POST"], path: "/logout" } },
  { name: "signup", match: { methods: ["POST"], path: "/signup" } },
  { name: "reset", match: { path: "/password/reset" } },
  { name: "health", match: { methods: ["GET"], path: "/health" } },
  { name: "ready", match: { methods: ["GET"], path: "/ready" } },
  { name: "admin", match: { host: "admin.example.com", prefix: "/" } },
  { name: "tenants", match: { host: "*.tenants.example.com", prefix: "/api" } },
  { name: "user-posts", match: { path: "/api/users/*/posts" } },
  { name: "user", match: { methods: ["GET", "PUT"], path: "/api/users/*" } },
  { name: "orders-write", match: { methods: ["POST", "PUT", "DELETE"], prefix: "/api/orders" } },
  { name: "orders", match: { prefix: "/api/orders" } },
  { name: "search", match: { methods: ["GET"], path: "/api/search" } },
  { name: "export", match: { prefix: "/api/export" } },
  { name: "upload", match: { methods: ["POST"], prefix: "/api/files" } },
  { name: "files", match: { prefix: "/api/files/*/raw" } },
  { name: "webhooks", match: { methods: ["POST"], prefix: "/hooks" } },
  { name: "graphql", match: { path: "/graphql" } },
  { name: "static", match: { methods: ["GET"], prefix: "/static" } },
  { name: "api", match: { prefix: "/api" } }
]

/** A `GET` path (any host but admin.example.com's and the tenants') that only the twentieth route, `api`, takes. */
export const LAST_PATH = "/api/bench"
