/**
 * @internal Client identity: addresses parsed into bytes, CIDRs, the forwarding headers
 * (`X-Forwarded-For`, RFC 7239 `Forwarded`) and the walk that picks the client's address from them; and the
 * one key of a request header, which the middleware and the proxy share. Pure: no sockets, no Effect.
 */
import type * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as Option from "effect/Option"
import type * as ClientIp from "../../ClientIp.js"
import * as address from "./address.js"

/** @internal */
export type Address = address.Address

/** @internal */
export const UNKNOWN = "unknown"

const DEFAULT_IPV6_PREFIX = 56

/** @internal */
export const parse = address.parse

/** @internal The key of an address: IPv4 as a dotted quad, IPv6 as its `/prefix` network. */
export const keyOf = (bytes: Address, ipv6Prefix: number): string =>
  bytes.length === 4 ? address.format(bytes) : `${address.format(address.masked(bytes, ipv6Prefix))}/${ipv6Prefix}`

/** @internal */
export const validPrefix = (prefix: number | undefined): number => {
  if (prefix === undefined) return DEFAULT_IPV6_PREFIX
  if (!Number.isSafeInteger(prefix) || prefix < 0 || prefix > 128) {
    throw new RangeError(`wakuwaku/http: ipv6Prefix must be an integer from 0 to 128, got ${String(prefix)}`)
  }
  return prefix
}

/** @internal */
export const normalize = (
  address: string,
  options?: { readonly ipv6Prefix?: number | undefined }
): string | undefined => {
  const prefix = validPrefix(options?.ipv6Prefix)
  const parsed = parse(address)
  return parsed === undefined ? undefined : keyOf(parsed, prefix)
}

/** Splits on `sep` outside double-quoted strings (with backslash escapes). */
const splitOutsideQuotes = (text: string, sep: string): Array<string> => {
  const parts: Array<string> = []
  let current = ""
  let quoted = false
  for (let i = 0; i < text.length; i++) {
    const c = text[i]!
    if (quoted && c === "\\" && i + 1 < text.length) {
      current += c + text[i + 1]
      i++
    } else if (c === "\"") {
      quoted = !quoted
      current += c
    } else if (!quoted && c === sep) {
      parts.push(current)
      current = ""
    } else {
      current += c
    }
  }
  parts.push(current)
  return parts
}

const unquote = (value: string): string => {
  const v = value.trim()
  return v.length >= 2 && v.startsWith("\"") && v.endsWith("\"") ? v.slice(1, -1).replace(/\\(.)/g, "$1") : v
}

/** @internal The hops of an `X-Forwarded-For` value, left (farthest) to right (nearest). */
export const xForwardedFor = (value: string): Array<Address | undefined> => value.split(",").map(parse)

/** @internal The `for=` nodes of a `Forwarded` value, left to right; an element without `for` is undefined. */
export const forwarded = (value: string): Array<Address | undefined> =>
  splitOutsideQuotes(value, ",").map((element) => {
    for (const pair of splitOutsideQuotes(element, ";")) {
      const eq = pair.indexOf("=")
      if (eq > 0 && pair.slice(0, eq).trim().toLowerCase() === "for") return parse(unquote(pair.slice(eq + 1)))
    }
    return undefined
  })

/** @internal What {@link resolver} reads from a request. */
export interface Input {
  readonly remoteAddress: string | undefined
  readonly headers: Readonly<Record<string, string | undefined>>
}

type Trust =
  | { readonly _tag: "None" }
  | { readonly _tag: "Cidrs"; readonly cidrs: ReadonlyArray<address.Cidr> }
  | { readonly _tag: "Hops"; readonly hops: number }

const trustOf = (trusted: ClientIp.Options["trustedProxies"]): Trust => {
  if (trusted === undefined) return { _tag: "None" }
  if (typeof trusted === "number") {
    if (!Number.isSafeInteger(trusted) || trusted < 0) {
      throw new RangeError(`wakuwaku/http: a trusted hop count must be a non-negative integer, got ${String(trusted)}`)
    }
    return trusted === 0 ? { _tag: "None" } : { _tag: "Hops", hops: trusted }
  }
  const cidrs = trusted.map((entry) => {
    try {
      return address.parseCidr(entry)
    } catch (error) {
      throw new RangeError(`wakuwaku/http: a trusted proxy: ${(error as Error).message}`)
    }
  })
  return cidrs.length === 0 ? { _tag: "None" } : { _tag: "Cidrs", cidrs }
}

/**
 * @internal The resolver for some options, checked now. The chain is the header's hops, left to right,
 * then the socket address. CIDRs: from the socket leftwards, skip trusted addresses; the first untrusted
 * one is the client; an entry that is not an address stops the walk at the hop on its right (the
 * trusted proxy that reported it); every hop trusted gives the leftmost. A hop count `n`: the socket
 * and the `n - 1` rightmost entries are proxies, the `n`-th entry from the right is the client (the
 * leftmost if the chain is shorter; the nearest address on its right if it is not an address).
 */
export const resolver = (options?: ClientIp.Options): (input: Input) => string => {
  const prefix = validPrefix(options?.ipv6Prefix)
  const trust = trustOf(options?.trustedProxies)
  const headerName = options?.header ?? "x-forwarded-for"
  if (headerName !== "x-forwarded-for" && headerName !== "forwarded") {
    throw new RangeError(
      `wakuwaku/http: header must be "x-forwarded-for" or "forwarded", got ${JSON.stringify(headerName)}`
    )
  }
  const hopsOf = headerName === "forwarded" ? forwarded : xForwardedFor
  const key = (hop: Address) => keyOf(hop, prefix)

  // The key of a socket address, remembered: most requests come on connections whose address was seen before.
  const socketKeys = new Map<string, string>()
  const socketKey = (remote: string, bytes: Address): string => {
    const known = socketKeys.get(remote)
    if (known !== undefined) return known
    const computed = key(bytes)
    if (socketKeys.size >= 1024) socketKeys.clear()
    socketKeys.set(remote, computed)
    return computed
  }

  return ({ headers, remoteAddress }) => {
    if (trust._tag === "None" && remoteAddress !== undefined) {
      const known = socketKeys.get(remoteAddress)
      if (known !== undefined) return known
    }
    const socket = remoteAddress === undefined ? undefined : parse(remoteAddress)
    if (socket === undefined) return UNKNOWN
    if (trust._tag === "None") return socketKey(remoteAddress!, socket)
    const value = headers[headerName]
    const hops = value === undefined ? [] : hopsOf(value)
    if (trust._tag === "Cidrs") {
      const trusted = (hop: Address) => trust.cidrs.some((cidr) => address.contains(cidr, hop))
      let last = socket
      if (!trusted(last)) return key(last)
      for (let i = hops.length - 1; i >= 0; i--) {
        const hop = hops[i]
        if (hop === undefined) return key(last)
        if (!trusted(hop)) return key(hop)
        last = hop
      }
      return key(last)
    }
    // Hops: chain = [...hops, socket]; the client is chain[chain.length - 1 - n], clamped to the leftmost.
    const chain = [...hops, socket]
    for (let i = Math.max(0, chain.length - 1 - trust.hops); i < chain.length; i++) {
      const hop = chain[i]
      if (hop !== undefined) return key(hop)
    }
    return key(socket)
  }
}

/** @internal {@link resolver} for a server request: its `remoteAddress` and headers. */
export const make = (options?: ClientIp.Options): (request: HttpServerRequest.HttpServerRequest) => string => {
  const resolve = resolver(options)
  // The platform builds a request's headers when first read: with no proxy trusted they are never read.
  const none = trustOf(options?.trustedProxies)._tag === "None"
  return (request) =>
    resolve({
      remoteAddress: Option.getOrUndefined(request.remoteAddress),
      headers: none ? NO_HEADERS : request.headers
    })
}

const NO_HEADERS: Readonly<Record<string, string | undefined>> = {}

const TOKEN = /^[!#$%&'*+.^_`|~0-9a-z-]+$/

/**
 * @internal The key of a request header `name`: `<name>=<value>` (the name lowercase), or without the header (or
 * when empty) `orElse`'s. No address key (a dotted quad, an IPv6 `/prefix` network, `unknown`) holds a `=`, and
 * a header name cannot: a client that sends a victim's address as the value spends a bucket of its own, and
 * two headers' keys never meet. A name that is not a token (RFC 9110 §5.1) is a `TypeError` now.
 */
export const headerKey = <I extends { readonly headers: Readonly<Record<string, string | undefined>> }, K>(
  name: string,
  orElse: (input: I) => K
): (input: I) => string | K => {
  const lower = typeof name === "string" ? name.toLowerCase() : ""
  if (!TOKEN.test(lower)) {
    throw new TypeError(`wakuwaku/http: a header name must be a token (RFC 9110 §5.1), got ${JSON.stringify(name)}`)
  }
  const prefix = `${lower}=`
  return (input) => {
    const value = input.headers[lower]
    return value === undefined || value === "" ? orElse(input) : prefix + value
  }
}
