/** @internal Header rules of the reverse proxy: hop-by-hop stripping, addresses. */
import * as address from "../http/address.js"

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

/** `Connection` values that name no other header (the usual ones): no set to build. */
const PLAIN_CONNECTION = /^\s*(?:keep-alive|close)\s*$/i

/**
 * @internal A copy of `headers` (lowercase names, as Node gives them) without the hop-by-hop headers: the
 * fixed ones and every header that `Connection` names, nor those in `skip`. `undefined` values are dropped.
 * Built in one pass, never deleted from (an object deleted from is slower to read and to write out).
 */
export const endToEnd = <V extends string | ReadonlyArray<string>>(
  headers: Readonly<Record<string, V | undefined>>,
  skip?: ReadonlySet<string>
): Record<string, V> => {
  const connection = headers["connection"]
  const proxyConnection = headers["proxy-connection"]
  const plain = (value: V | undefined) =>
    value === undefined || (typeof value === "string" && PLAIN_CONNECTION.test(value))
  // Runs twice per request: no set unless a Connection header names something.
  const named: ReadonlySet<string> | undefined = plain(connection) && plain(proxyConnection)
    ? undefined
    : new Set([...connectionOptions(connection), ...connectionOptions(proxyConnection)])
  const out: Record<string, V> = {}
  for (const name in headers) {
    const value = headers[name]
    if (
      value === undefined || HOP_BY_HOP_SET.has(name) || named?.has(name) === true || skip?.has(name) === true
    ) continue
    out[name] = value
  }
  return out
}

/**
 * @internal An address as a client is known by: IPv4-mapped IPv6 (`::ffff:127.0.0.1`) back to IPv4, IPv6 in
 * RFC 5952 form; text that is no address is kept as it is.
 */
export const normalizeAddress = (text: string): string => {
  const parsed = address.parse(text)
  return parsed === undefined ? text : address.format(parsed)
}
