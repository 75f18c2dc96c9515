/** @internal Header rules of the reverse proxy: hop-by-hop stripping, forwarding headers, Set-Cookie, addresses. */
import { BlockList, isIP } from "node:net"

/**
 * @internal The hop-by-hop headers of RFC 9110 §7.6.1, plus the legacy ones that still travel as such
 * (`Keep-Alive`, `Proxy-Connection`) and the proxy credentials, which belong to one hop: none is ever
 * forwarded, in either direction.
 */
export const HOP_BY_HOP: ReadonlyArray<string> = [
  "connection",
  "keep-alive",
  "proxy-connection",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade",
  "proxy-authorization",
  "proxy-authenticate"
]

const HOP_BY_HOP_SET: ReadonlySet<string> = new Set(HOP_BY_HOP)

/** @internal The header names a `Connection` (or `Proxy-Connection`) value lists, lowercased. */
export const connectionOptions = (value: string | ReadonlyArray<string> | undefined): ReadonlyArray<string> =>
  value === undefined ? [] : (typeof value === "string" ? [value] : value)
    .flatMap((line) => line.split(","))
    .map((token) => token.trim().toLowerCase())
    .filter((token) => token !== "")

/**
 * @internal A copy of `headers` (lowercase names) without the hop-by-hop headers: the fixed ones and
 * every header that `Connection` names. `undefined` values are dropped.
 */
export const endToEnd = <V extends string | ReadonlyArray<string>>(
  headers: Readonly<Record<string, V | undefined>>
): Record<string, V> => {
  const connection = headers["connection"]
  const proxyConnection = headers["proxy-connection"]
  // Runs twice per request: no set unless a Connection header names something.
  const named: ReadonlySet<string> | undefined = connection === undefined && proxyConnection === undefined
    ? undefined
    : new Set([...connectionOptions(connection), ...connectionOptions(proxyConnection)])
  const out: Record<string, V> = {}
  for (const name in headers) {
    const value = headers[name]
    const key = name.toLowerCase()
    if (value === undefined || HOP_BY_HOP_SET.has(key) || named?.has(key) === true) continue
    out[key] = value
  }
  return out
}

// A comma starts a new cookie only when a cookie name and `=` follow it (`Expires=Wed, 21 Oct …` does not).
const NEXT_COOKIE = /\s*[^\s=;,]+=/y

/**
 * @internal Splits `Set-Cookie` values that were joined with `, ` back into one per cookie, as fetch's
 * `getSetCookie` does: a comma separates two cookies only when a name and `=` follow it.
 */
export const splitSetCookie = (joined: string): Array<string> => {
  const cookies: Array<string> = []
  let start = 0
  for (let i = joined.indexOf(","); i !== -1; i = joined.indexOf(",", i + 1)) {
    NEXT_COOKIE.lastIndex = i + 1
    if (NEXT_COOKIE.test(joined)) {
      cookies.push(joined.slice(start, i).trim())
      start = i + 1
    }
  }
  cookies.push(joined.slice(start).trim())
  return cookies.filter((cookie) => cookie !== "")
}

/** @internal An address as a client is known by: IPv4-mapped IPv6 (`::ffff:127.0.0.1`) back to IPv4. */
export const normalizeAddress = (address: string): string => {
  const mapped = /^::ffff:(\d{1,3}(?:\.\d{1,3}){3})$/i.exec(address)
  return mapped?.[1] ?? address
}

/**
 * @internal A predicate over addresses, from a list of addresses and CIDR blocks (`10.0.0.0/8`,
 * `::1`, `fd00::/8`). Throws a `RangeError` on an entry that is neither.
 */
export const trustList = (entries: ReadonlyArray<string>): (address: string) => boolean => {
  if (entries.length === 0) return () => false
  const list = new BlockList()
  for (const entry of entries) {
    const [rawAddress = "", prefixText, extra] = entry.trim().split("/")
    const address = normalizeAddress(rawAddress)
    const family = isIP(address)
    const max = family === 4 ? 32 : 128
    const prefix = prefixText === undefined ? max : /^\d{1,3}$/.test(prefixText) ? Number(prefixText) : NaN
    if (family === 0 || extra !== undefined || !(prefix >= 0 && prefix <= max)) {
      throw new RangeError(`not an IP address or CIDR block: ${JSON.stringify(entry)}`)
    }
    list.addSubnet(address, prefix, family === 4 ? "ipv4" : "ipv6")
  }
  return (candidate) => {
    const address = normalizeAddress(candidate)
    const family = isIP(address)
    return family !== 0 && list.check(address, family === 4 ? "ipv4" : "ipv6")
  }
}
