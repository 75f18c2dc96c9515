/**
 * @internal URLs that may hold a secret: the one parser of Redis URLs, and {@link mask}, the one way any
 * URL is printed (in a banner, a warning, an error, a log line or a span). Free of Effect and of
 * @effect/platform, so that the command line can use it.
 */

/** @internal A Redis URL, read: what an ioredis client needs to reach the server. */
export interface RedisUrl {
  readonly tls: boolean
  /** The host name or address, an IPv6 address without its brackets. */
  readonly host: string
  readonly port: number
  readonly username: string | undefined
  readonly password: string | undefined
  readonly db: number | undefined
  /** The query's parameters, which ioredis reads as options (`?family=6`); the URL's own parts win. */
  readonly query: Readonly<Record<string, string | number>>
}

/** A query parameter whose value is a secret: `?password=…`, `?sentinelPassword=…`, a token. */
const SECRET_PARAMETER = /pass|secret|token|auth/i

/**
 * @internal `text` as it may be printed: a URL without its userinfo (`redis://***@host:6379/0`) and with
 * the value of every secret-looking query parameter replaced by `***`. A string that is not a URL, or in
 * which an `@` comes after the host (a password holding `/`, `?` or `#` unencoded, which a URL parser
 * reads as the end of the userinfo), shows nothing between its `scheme://` and its last `@`, nor, when it
 * has no `@`, anything after the `scheme://` (`redis://:secret`, the host forgotten). A string with neither
 * has nothing in a password's place, and shows as it is (`/api`).
 */
export const mask = (text: string): string => {
  let url: URL | undefined
  try {
    url = new URL(text)
  } catch {
    url = undefined
  }
  if (url !== undefined && !`${url.pathname}${url.search}${url.hash}`.includes("@")) {
    const secrets = [...url.searchParams.keys()].filter((name) => SECRET_PARAMETER.test(name))
    // Nothing to hide: the text as written (the parser would add a `/` to `http://host`).
    if (url.username === "" && url.password === "" && secrets.length === 0) return text
    if (url.username !== "" || url.password !== "") {
      url.username = "***"
      url.password = ""
    }
    for (const name of secrets) url.searchParams.set(name, "***")
    return url.href
  }
  const scheme = /^\s*[a-z][a-z0-9+.-]*:\/\//i.exec(text)?.[0].trimStart() ?? ""
  const at = text.lastIndexOf("@")
  if (at !== -1) return `${scheme}***@${text.slice(at + 1).trimEnd()}`
  return scheme === "" ? text : `${scheme}***`
}

const invalid = (what: string, text: string): TypeError => new TypeError(`${what}, got ${JSON.stringify(mask(text))}`)

/**
 * @internal Reads `redis://[[user]:password@]host[:port][/db][?options]` (`rediss://` for TLS) with the
 * WHATWG URL parser, or throws a `TypeError` saying what is wrong, the URL masked. Userinfo is
 * percent-decoded. An `@` after the host, or a path that is not a database number, is refused: it is
 * what a password holding an unencoded `/`, `?` or `#` looks like, and the rest of it would otherwise be
 * taken for the host or the database.
 */
export const parseRedisUrl = (text: string): RedisUrl => {
  const encode = "percent-encode a password's / ? # and @ (%2F %3F %23 %40)"
  let url: URL
  try {
    url = new URL(text)
  } catch {
    throw invalid(text.includes("@") ? `not a URL: ${encode}` : "expected a redis:// or rediss:// URL", text)
  }
  if (url.protocol !== "redis:" && url.protocol !== "rediss:") {
    throw invalid("expected a redis:// or rediss:// URL", text)
  }
  if (`${url.pathname}${url.search}${url.hash}`.includes("@")) throw invalid(`an @ after the host: ${encode}`, text)
  if (url.hostname === "") throw invalid("expected a host after redis://", text)
  if (url.pathname !== "" && url.pathname !== "/" && !/^\/\d{1,9}$/.test(url.pathname)) {
    throw invalid("expected a database number after the host, such as /0", text)
  }
  if (url.hash !== "") throw invalid("expected no fragment (#…)", text)
  const decoded = (part: string): string | undefined => {
    if (part === "") return undefined
    try {
      return decodeURIComponent(part)
    } catch {
      throw invalid("a malformed percent-encoding (%) in the user or the password", text)
    }
  }
  const query: Record<string, string | number> = {}
  for (const [name, value] of url.searchParams) {
    // As ioredis reads a URL's query: `family` a number, the rest strings.
    query[name] = name === "family" && /^\d+$/.test(value) ? Number(value) : value
  }
  return {
    tls: url.protocol === "rediss:",
    host: url.hostname.replace(/^\[(.*)\]$/, "$1"),
    port: url.port === "" ? 6379 : Number(url.port),
    username: decoded(url.username),
    password: decoded(url.password),
    db: url.pathname.length > 1 ? Number(url.pathname.slice(1)) : undefined,
    query
  }
}
