/**
 * @internal Client identity: addresses parsed into bytes, CIDRs, the forwarding headers
 * (`X-Forwarded-For`, RFC 7239 `Forwarded`) and the walk that picks the client's address from them.
 * Pure: no sockets, no Effect.
 */
import type * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as Option from "effect/Option"
import type * as ClientIp from "../../ClientIp.js"

/** @internal An address as bytes: 4 for IPv4, 16 for IPv6. IPv4-mapped IPv6 is always IPv4 here. */
export type Address = Uint8Array

/** @internal */
export const UNKNOWN = "unknown"

const DEFAULT_IPV6_PREFIX = 56

/** 0 to 255, no leading zeros. */
const OCTET = String.raw`(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)`
const IPV4 = new RegExp(`^${OCTET}\\.${OCTET}\\.${OCTET}\\.${OCTET}$`)
const GROUP = /^[0-9A-Fa-f]{1,4}$/

const parseIpv4 = (text: string): Address | undefined => {
  const m = IPV4.exec(text)
  return m === null ? undefined : Uint8Array.of(Number(m[1]), Number(m[2]), Number(m[3]), Number(m[4]))
}

/** Groups of one side of `::` (or of a whole address), the last possibly a dotted IPv4; undefined if bad. */
const groupsOf = (side: string, last: boolean): Array<number> | undefined => {
  if (side === "") return []
  const parts = side.split(":")
  const groups: Array<number> = []
  for (let i = 0; i < parts.length; i++) {
    const part = parts[i]!
    if (last && i === parts.length - 1 && part.includes(".")) {
      const v4 = parseIpv4(part)
      if (v4 === undefined) return undefined
      groups.push((v4[0]! << 8) | v4[1]!, (v4[2]! << 8) | v4[3]!)
    } else if (GROUP.test(part)) {
      groups.push(parseInt(part, 16))
    } else {
      return undefined
    }
  }
  return groups
}

const parseIpv6 = (text: string): Address | undefined => {
  const halves = text.split("::")
  if (halves.length > 2) return undefined
  let groups: Array<number>
  if (halves.length === 2) {
    const head = groupsOf(halves[0]!, false)
    const tail = groupsOf(halves[1]!, true)
    if (head === undefined || tail === undefined || head.length + tail.length > 7) return undefined
    groups = [...head, ...Array<number>(8 - head.length - tail.length).fill(0), ...tail]
  } else {
    const all = groupsOf(text, true)
    if (all === undefined || all.length !== 8) return undefined
    groups = all
  }
  const bytes = new Uint8Array(16)
  groups.forEach((group, i) => {
    bytes[2 * i] = group >> 8
    bytes[2 * i + 1] = group & 0xff
  })
  return bytes
}

const isMapped = (bytes: Address): boolean =>
  bytes.length === 16 && bytes.subarray(0, 10).every((b) => b === 0) && bytes[10] === 0xff && bytes[11] === 0xff

/**
 * @internal One address as it appears in a socket, an `X-Forwarded-For` entry or a `Forwarded` `for=`:
 * IPv4 (`a.b.c.d`, optionally `:port`), IPv6 (optionally with a `%zone`, or bracketed with an optional
 * `:port`). IPv4-mapped IPv6 comes back as IPv4. Undefined for anything else (`unknown`, `_hidden`).
 */
export const parse = (raw: string): Address | undefined => {
  let text = raw.trim()
  if (text.startsWith("[")) {
    const close = text.indexOf("]")
    if (close < 0) return undefined
    const rest = text.slice(close + 1)
    if (rest !== "" && !/^:\d{1,5}$/.test(rest)) return undefined
    text = text.slice(1, close)
    if (text.includes(".") && !text.includes(":")) return undefined
  } else if (/^[\d.]+:\d{1,5}$/.test(text)) {
    text = text.slice(0, text.indexOf(":"))
  }
  if (!text.includes(":")) return parseIpv4(text)
  const zone = text.indexOf("%")
  if (zone >= 0) text = text.slice(0, zone)
  const v6 = parseIpv6(text)
  if (v6 === undefined) return undefined
  return isMapped(v6) ? v6.slice(12) : v6
}

/** RFC 5952: lowercase, no leading zeros, the longest run of two or more zero groups as `::` (the first on a tie). */
const formatIpv6 = (bytes: Address): string => {
  const groups = Array.from({ length: 8 }, (_, i) => (bytes[2 * i]! << 8) | bytes[2 * i + 1]!)
  let bestStart = -1
  let bestLength = 1
  for (let i = 0; i < 8;) {
    if (groups[i] !== 0) {
      i++
      continue
    }
    let j = i
    while (j < 8 && groups[j] === 0) j++
    if (j - i > bestLength) {
      bestStart = i
      bestLength = j - i
    }
    i = j
  }
  const hex = (from: number, to: number) => groups.slice(from, to).map((g) => g.toString(16)).join(":")
  return bestStart < 0 ? hex(0, 8) : `${hex(0, bestStart)}::${hex(bestStart + bestLength, 8)}`
}

/** The first `bits` bits of `bytes`, the rest zeroed. */
const masked = (bytes: Address, bits: number): Address => {
  const out = new Uint8Array(bytes.length)
  for (let i = 0; i < bytes.length; i++) {
    const keep = Math.min(8, Math.max(0, bits - 8 * i))
    out[i] = bytes[i]! & ((0xff00 >> keep) & 0xff)
  }
  return out
}

/** @internal The key of an address: IPv4 as a dotted quad, IPv6 as its `/prefix` network. */
export const keyOf = (address: Address, ipv6Prefix: number): string =>
  address.length === 4 ? address.join(".") : `${formatIpv6(masked(address, ipv6Prefix))}/${ipv6Prefix}`

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

interface Cidr {
  readonly network: Address
  readonly bits: number
}

/**
 * @internal `a.b.c.d/n`, `v6/n`, or a bare address (all of its bits). IPv4-mapped networks of /96 or longer
 * become IPv4.
 */
export const parseCidr = (text: string): Cidr => {
  const slash = text.indexOf("/")
  const addressText = slash < 0 ? text : text.slice(0, slash)
  const bitsText = slash < 0 ? undefined : text.slice(slash + 1)
  const raw = addressText.includes(":") ? parseIpv6(addressText.trim()) : parseIpv4(addressText.trim())
  if (raw === undefined || (bitsText !== undefined && !/^\d{1,3}$/.test(bitsText))) {
    throw new RangeError(`wakuwaku/http: a trusted proxy must be an address or a CIDR, got ${JSON.stringify(text)}`)
  }
  let bits = bitsText === undefined ? raw.length * 8 : Number(bitsText)
  if (bits > raw.length * 8) {
    throw new RangeError(`wakuwaku/http: ${JSON.stringify(text)} has more prefix bits than its address has`)
  }
  let network = raw
  if (isMapped(raw) && bits >= 96) {
    network = raw.slice(12)
    bits -= 96
  }
  return { network: masked(network, bits), bits }
}

const contains = (cidr: Cidr, address: Address): boolean => {
  if (cidr.network.length !== address.length) return false
  const m = masked(address, cidr.bits)
  return m.every((b, i) => b === cidr.network[i])
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
  | { readonly _tag: "Cidrs"; readonly cidrs: ReadonlyArray<Cidr> }
  | { readonly _tag: "Hops"; readonly hops: number }

const trustOf = (trusted: ClientIp.Options["trustedProxies"]): Trust => {
  if (trusted === undefined) return { _tag: "None" }
  if (typeof trusted === "number") {
    if (!Number.isSafeInteger(trusted) || trusted < 0) {
      throw new RangeError(`wakuwaku/http: a trusted hop count must be a non-negative integer, got ${String(trusted)}`)
    }
    return trusted === 0 ? { _tag: "None" } : { _tag: "Hops", hops: trusted }
  }
  const cidrs = trusted.map(parseCidr)
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
  const key = (address: Address) => keyOf(address, prefix)

  return ({ headers, remoteAddress }) => {
    const socket = remoteAddress === undefined ? undefined : parse(remoteAddress)
    if (socket === undefined) return UNKNOWN
    if (trust._tag === "None") return key(socket)
    const value = headers[headerName]
    const hops = value === undefined ? [] : hopsOf(value)
    if (trust._tag === "Cidrs") {
      const trusted = (address: Address) => trust.cidrs.some((cidr) => contains(cidr, address))
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
  return (request) => resolve({ remoteAddress: Option.getOrUndefined(request.remoteAddress), headers: request.headers })
}
