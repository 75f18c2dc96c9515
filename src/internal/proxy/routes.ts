/**
 * @internal Which route a request takes: the first of an ordered list whose methods, host and path match it,
 * else the default. Compiled once per proxy; free of @effect/platform.
 *
 * **The path matched is the path as an upstream may read it**, so that spelling a path another way cannot
 * dodge its route's limits. From the target's path with its dot segments removed (as the proxy forwards it,
 * ./target.ts), the path matched:
 * - has every `%XX` decoded (`/%6cogin` is `/login`; an encoded slash `%2F` is a slash), and `\` read as `/`;
 * - has dot segments removed again after decoding, and empty segments dropped (`//login` is `/login`);
 * - has each segment's `;parameters` dropped (`/login;jsessionid=1` is `/login`, as servlet containers read
 *   it);
 * - is lowercase (`/LOGIN` is `/login`: many servers route paths without regard to case);
 * - has no trailing slash (`/login/` is `/login`, as most routers take it).
 * A pattern is read the same way. The query is never matched.
 *
 * Patterns: `path` matches that path exactly; `prefix` matches it and every path below it, segment by segment
 * (`/api` matches `/api` and `/api/users`, not `/apix`); in either, a segment that is `*` matches any one
 * segment (the path `/files/*` matches `/files/a`, not `/files/a/b`). A method list that has `GET` takes
 * `HEAD` too. A host matches the `Host` header without its port, case aside; `*.example.com` matches every
 * name below `example.com`.
 */
import { removeDotSegments } from "./target.js"

/** @internal What a route matches; every field given must match, and a field not given matches anything. */
export interface Match {
  /** Methods, such as `["POST"]`; one with `GET` takes `HEAD` too. */
  readonly methods?: ReadonlyArray<string> | undefined
  /** A host name (`api.example.com`) or every name below one (`*.example.com`), without a port. */
  readonly host?: string | undefined
  /** A path, exactly (a `*` segment matches any one segment). */
  readonly path?: string | undefined
  /** A path and every path below it (a `*` segment matches any one segment). */
  readonly prefix?: string | undefined
}

const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/
const HOST = /^(?:\*\.)?[a-z0-9_-]+(?:\.[a-z0-9_-]+)*\.?$|^\[[0-9a-f:.]+\]$/

/** Decodes every `%XX`: as UTF-8 when it is, else each ASCII one alone (`%FF` stays as it is). */
const decode = (path: string): string => {
  try {
    return decodeURIComponent(path)
  } catch {
    return path.replace(/%([0-7][0-9a-f])/gi, (_, hex: string) => String.fromCharCode(parseInt(hex, 16)))
  }
}

/** Most paths are matched as they come: no `%`, `\`, `;`, capital, empty segment or trailing slash. */
const PLAIN = /[%\\;A-Z]|\/\/|.\/$/

/**
 * @internal The path a route matches, from a path with its dot segments removed (see the module doc): decoded,
 * dot and empty segments removed, `;parameters` dropped, lowercase, no trailing slash; `""` for `*` (`OPTIONS
 * *`), which no path or prefix pattern matches.
 */
export const matchPath = (path: string): string => {
  if (path === "*") return ""
  if (!PLAIN.test(path)) return path
  const decoded = path.includes("%") ? decode(path) : path
  const output: Array<string> = []
  for (const part of decoded.replace(/\\/g, "/").split("/")) {
    const semicolon = part.indexOf(";")
    const segment = semicolon < 0 ? part : part.slice(0, semicolon)
    if (segment === "" || segment === ".") continue
    if (segment === "..") output.pop()
    else output.push(segment.toLowerCase())
  }
  return `/${output.join("/")}`
}

/** @internal A host as routes match it: lowercase, without its port or a trailing dot. */
export const matchHost = (host: string): string => {
  const lower = host.toLowerCase()
  const end = lower.startsWith("[") ? lower.indexOf("]") + 1 : lower.lastIndexOf(":")
  const name = end > 0 ? lower.slice(0, end) : lower
  return name.endsWith(".") ? name.slice(0, -1) : name
}

/** @internal Why `pattern` is not a path pattern, or undefined when it is one. */
export const patternProblem = (pattern: string): string | undefined => {
  if (!pattern.startsWith("/")) return "expected a path that starts with /"
  if (/[?#]/.test(pattern)) return "expected a path with no query or fragment (? or #)"
  const segments = pattern.split("/")
  if (segments.some((s) => s.includes("*") && s !== "*")) {
    return "expected each * to be a whole segment, as in /users/*/posts"
  }
  if (segments.some((s) => s === "." || s === "..")) return "expected a path with no . or .. segment"
  return undefined
}

/** @internal Why `host` is not a host pattern, or undefined when it is one. */
export const hostProblem = (host: string): string | undefined =>
  HOST.test(host.toLowerCase()) ? undefined : "expected a host name without a port, or *.name for every name below it"

/** @internal Why `method` is not a method, or undefined when it is one. */
export const methodProblem = (method: string): string | undefined =>
  TOKEN.test(method) ? undefined : "expected a method such as GET or POST"

/** A path pattern as a test of a matched path. */
const pathTest = (pattern: string, prefix: boolean): (path: string) => boolean => {
  const canonical = matchPath(removeDotSegments(pattern) ?? pattern)
  if (!canonical.split("/").includes("*")) {
    if (!prefix) return (path) => path === canonical
    if (canonical === "/") return () => true
    return (path) =>
      path.length === canonical.length
        ? path === canonical
        : path.charCodeAt(canonical.length) === 47 && path.startsWith(canonical)
  }
  const source = canonical.split("/").map((s) => s === "*" ? "[^/]+" : s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"))
    .join("/")
  const regex = new RegExp(`^${source}${prefix ? "(?:/|$)" : "$"}`)
  return (path) => regex.test(path)
}

/** A host pattern as a test of a matched host. */
const hostTest = (pattern: string): (host: string) => boolean => {
  const canonical = matchHost(pattern)
  if (!canonical.startsWith("*.")) return (host) => host === canonical
  const suffix = canonical.slice(1)
  return (host) => host.length > suffix.length && host.endsWith(suffix)
}

/** A route's match, compiled. */
interface Compiled<R> {
  readonly route: R
  readonly methods: ReadonlySet<string> | undefined
  readonly host: ((host: string) => boolean) | undefined
  readonly path: ((path: string) => boolean) | undefined
}

/**
 * @internal Checks `match` (a `TypeError` naming the field and what was expected), or returns undefined; `at`
 * names the route in the message.
 */
export const checkMatch = (match: Match, at: string): void => {
  const fail = (field: string, problem: string, value: unknown): never => {
    throw new TypeError(`wakuwaku/Proxy: ${at}.match.${field}: ${problem}, got ${JSON.stringify(value)}`)
  }
  if (match.path !== undefined && match.prefix !== undefined) {
    throw new TypeError(`wakuwaku/Proxy: ${at}.match: give path or prefix, not both`)
  }
  for (const field of ["path", "prefix"] as const) {
    const pattern = match[field]
    if (pattern === undefined) continue
    const problem = typeof pattern === "string" ? patternProblem(pattern) : "expected a path"
    if (problem !== undefined) fail(field, problem, pattern)
  }
  if (match.host !== undefined) {
    const problem = typeof match.host === "string" ? hostProblem(match.host) : "expected a host name"
    if (problem !== undefined) fail("host", problem, match.host)
  }
  if (match.methods !== undefined) {
    if (!Array.isArray(match.methods) || match.methods.length === 0) {
      fail("methods", "expected a non-empty list of methods", match.methods)
    }
    for (const method of match.methods) {
      const problem = typeof method === "string" ? methodProblem(method) : "expected a method"
      if (problem !== undefined) fail("methods", problem, method)
    }
  }
}

const compileOne = <R>(route: R, match: Match | undefined): Compiled<R> => {
  const methods = match?.methods?.map((m) => m.toUpperCase())
  if (methods?.includes("GET") && !methods.includes("HEAD")) methods.push("HEAD")
  return {
    route,
    methods: methods === undefined ? undefined : new Set(methods),
    host: match?.host === undefined ? undefined : hostTest(match.host),
    path: match?.path !== undefined
      ? pathTest(match.path, false)
      : match?.prefix !== undefined
      ? pathTest(match.prefix, true)
      : undefined
  }
}

/**
 * @internal The router of `routes` (each with its match, checked by {@link checkMatch}): for a request's
 * method, `Host` header and path (dot segments removed, no query), the first route that matches, else
 * `fallback`. The host and the path are read once per request, and only when a route asks for them.
 */
export const compile = <R extends { readonly match?: Match | undefined }>(
  routes: ReadonlyArray<R>,
  fallback: R
): (method: string, host: string | undefined, path: string) => R => {
  if (routes.length === 0) return () => fallback
  const compiled = routes.map((route) => compileOne(route, route.match))
  return (method, rawHost, rawPath) => {
    let host: string | undefined
    let path: string | undefined
    for (let i = 0; i < compiled.length; i++) {
      const c = compiled[i]!
      if (c.methods !== undefined && !c.methods.has(method)) continue
      if (c.host !== undefined) {
        if (rawHost === undefined) continue
        if (!c.host(host ??= matchHost(rawHost))) continue
      }
      if (c.path !== undefined && !c.path(path ??= matchPath(rawPath))) continue
      return c.route
    }
    return fallback
  }
}
