/** @internal Where a request goes: the upstream URL and the request target. Free of @effect/platform. */
import { mask } from "../url.js"

/**
 * @internal The upstream: its origin (`http://host:port`), what `http.request` needs to reach it, and a
 * base path without its trailing slash.
 */
export interface Upstream {
  readonly origin: string
  readonly protocol: "http:" | "https:"
  /** The host name or address, an IPv6 address without its brackets. */
  readonly hostname: string
  /** The port; the scheme's default when the URL gives none. */
  readonly port: number
  readonly basePath: string
}

/**
 * @internal Reads an upstream URL, or throws a `TypeError` saying what is wrong: it must be an absolute
 * http(s) URL without query, fragment or credentials.
 */
export const parseUpstream = (input: string | URL): Upstream => {
  const text = String(input)
  // The URL as an error may print it: a password in it is masked.
  const shown = JSON.stringify(mask(text))
  let url: URL
  try {
    url = new URL(text)
  } catch {
    throw new TypeError(`the upstream must be an absolute http:// or https:// URL, got ${shown}`)
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw new TypeError(`the upstream must be an http:// or https:// URL, got ${shown}`)
  }
  if (url.search !== "" || url.hash !== "" || url.username !== "" || url.password !== "") {
    throw new TypeError(`the upstream URL must have no query, fragment or credentials, got ${shown}`)
  }
  const protocol = url.protocol === "https:" ? "https:" : "http:"
  return {
    origin: url.origin,
    protocol,
    hostname: url.hostname.replace(/^\[(.*)\]$/, "$1"),
    port: url.port === "" ? (protocol === "https:" ? 443 : 80) : Number(url.port),
    basePath: url.pathname.replace(/\/+$/, "")
  }
}

/** A segment that some server would take for `.` or `..`: dots, also percent-encoded, with `;params`. */
const DOTS = /^(?:\.|%2e){1,2}(?:;.*)?$/i

/**
 * Whether a segment (as written, percent-encoded) hides a dot segment that an upstream which decodes
 * `%2F` or `%5C`, or reads `\` as `/`, would see: `..%2Fadmin`, `..\\admin`, `.%2e;x%2F`.
 */
const hidesDots = (segment: string): boolean => {
  if (!/%2f|%5c|\\/i.test(segment)) return false
  let decoded: string
  try {
    decoded = decodeURIComponent(segment)
  } catch {
    return true
  }
  return decoded.split(/[/\\]/).some((part) => DOTS.test(part))
}

/**
 * @internal A request path with its dot segments removed (RFC 3986 §5.2.4), percent-encoded dots
 * (`%2e`) and `..;x` (read as `..` by some servers) counting as dots, so that it cannot climb above the
 * upstream's base path; undefined (answered 400) for a segment that hides a dot segment behind an
 * encoded slash or a backslash. The result starts with `/`.
 */
export const removeDotSegments = (path: string): string | undefined => {
  const output: Array<string> = []
  const segments = path.split("/")
  // The first is the empty string before the leading `/`.
  for (let i = 1; i < segments.length; i++) {
    const segment = segments[i]!
    const last = i === segments.length - 1
    if (DOTS.test(segment)) {
      const dots = segment.split(";")[0]!.replace(/%2e/gi, ".")
      if (dots === "..") output.pop()
      // A trailing dot segment leaves a directory: `/a/b/..` is `/a/`.
      if (last) output.push("")
      continue
    }
    if (hidesDots(segment)) return undefined
    output.push(segment)
  }
  return `/${output.join("/")}`
}

/**
 * @internal The path (and query) of a request target with its dot segments removed, before the upstream's base
 * path; undefined when the target cannot be forwarded (400). The origin form (`/p?q`) and the absolute form
 * (`http://host/p?q`) have their dot segments removed; the asterisk form (`*`) is kept as it is for `OPTIONS`
 * (it names the server, not a path) and refused for any other method. Routes match this path
 * (./routes.ts), so that it is the one the upstream is sent.
 */
export const targetPath = (target: string, method = "GET"): string | undefined => {
  // Most targets hold no dot, percent sign or backslash, and so no dot segment to remove.
  if (target.charCodeAt(0) === 47 && !/[.%\\]/.test(target)) return target
  if (target === "*") return method === "OPTIONS" ? "*" : undefined
  let path: string
  let query: string
  if (target.startsWith("/")) {
    const q = target.indexOf("?")
    path = q < 0 ? target : target.slice(0, q)
    query = q < 0 ? "" : target.slice(q)
  } else {
    try {
      const url = new URL(target)
      if (url.protocol !== "http:" && url.protocol !== "https:") return undefined
      path = url.pathname
      query = url.search
    } catch {
      return undefined
    }
  }
  const normalized = removeDotSegments(path)
  return normalized === undefined ? undefined : normalized + query
}

/**
 * @internal A {@link targetPath} as the upstream is sent it: under its base path (`*` as it is).
 */
export const underBase = (upstream: Upstream, path: string): string => path === "*" ? "*" : upstream.basePath + path

/**
 * @internal The path (and query) the upstream is sent for a request target, under the upstream's base
 * path; undefined when the target cannot be forwarded (400): {@link targetPath} under the base path.
 */
export const upstreamPath = (upstream: Upstream, target: string, method = "GET"): string | undefined => {
  const path = targetPath(target, method)
  return path === undefined ? undefined : underBase(upstream, path)
}

/** @internal A host as a URL writes it: an IPv6 address in brackets. */
export const hostForUrl = (host: string): string => host.includes(":") ? `[${host}]` : host
