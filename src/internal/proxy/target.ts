/** @internal Where a request goes: the upstream URL and the request target. Free of @effect/platform. */

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
  let url: URL
  try {
    url = new URL(text)
  } catch {
    throw new TypeError(`the upstream must be an absolute http:// or https:// URL, got ${JSON.stringify(text)}`)
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw new TypeError(`the upstream must be an http:// or https:// URL, got ${JSON.stringify(text)}`)
  }
  if (url.search !== "" || url.hash !== "" || url.username !== "" || url.password !== "") {
    throw new TypeError(`the upstream URL must have no query, fragment or credentials, got ${JSON.stringify(text)}`)
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

/** @internal The path and query of a request target, also of the absolute form (`GET http://host/p?q`). */
export const pathAndQuery = (target: string): string => {
  if (target.startsWith("/")) return target
  try {
    const url = new URL(target)
    return url.pathname + url.search
  } catch {
    return "/"
  }
}

/** @internal The path (and query) the upstream is sent a request for `target`. */
export const upstreamPath = (upstream: Upstream, target: string): string => upstream.basePath + pathAndQuery(target)
