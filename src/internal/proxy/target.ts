/** @internal Where a request goes: the upstream URL and the request target. Free of @effect/platform. */

/** @internal The upstream as an origin (`http://host:port`) and a base path without its trailing slash. */
export interface Upstream {
  readonly origin: string
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
  return { origin: url.origin, basePath: url.pathname.replace(/\/+$/, "") }
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

/** @internal The URL the upstream is sent a request for `target`. */
export const upstreamUrl = (upstream: Upstream, target: string): string =>
  upstream.origin + upstream.basePath + pathAndQuery(target)
