/**
 * @internal IP addresses and CIDR blocks: the one parser that `ClientIp`, the proxy and the command line
 * share, so that one text means one thing everywhere. Pure: no sockets, no Effect, no @effect/platform.
 *
 * - An address is IPv4 (`a.b.c.d`, no leading zeros) or IPv6 (RFC 4291 text, a dotted IPv4 tail allowed,
 *   an optional `%zone`, which is dropped). IPv4-mapped IPv6 (`::ffff:1.2.3.4`) is IPv4.
 * - In a request (a socket, an `X-Forwarded-For` entry, a `Forwarded` `for=`) a port may follow:
 *   `1.2.3.4:80`, `[::1]:80`.
 * - A CIDR block is an address (no port) and an optional `/bits`; an IPv4-mapped block of /96 or more is
 *   the IPv4 block it maps (`::ffff:10.0.0.0/104` is `10.0.0.0/8`).
 */

/** @internal An address as bytes: 4 for IPv4, 16 for IPv6. IPv4-mapped IPv6 is always IPv4 here. */
export type Address = Uint8Array

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

/** An address without port or brackets: IPv4, or IPv6 with an optional zone (dropped); mapped IPv6 as IPv4. */
const parseBare = (text: string): Address | undefined => {
  if (!text.includes(":")) return parseIpv4(text)
  const zone = text.indexOf("%")
  const v6 = parseIpv6(zone >= 0 ? text.slice(0, zone) : text)
  if (v6 === undefined) return undefined
  return isMapped(v6) ? v6.slice(12) : v6
}

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
    if (!text.includes(":")) return undefined
  } else if (/^[\d.]+:\d{1,5}$/.test(text)) {
    text = text.slice(0, text.indexOf(":"))
  }
  return parseBare(text)
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

/** @internal An address as text: IPv4 dotted, IPv6 in RFC 5952 form. */
export const format = (address: Address): string => address.length === 4 ? address.join(".") : formatIpv6(address)

/** @internal The first `bits` bits of `bytes`, the rest zeroed. */
export const masked = (bytes: Address, bits: number): Address => {
  const out = new Uint8Array(bytes.length)
  for (let i = 0; i < bytes.length; i++) {
    const keep = Math.min(8, Math.max(0, bits - 8 * i))
    out[i] = bytes[i]! & ((0xff00 >> keep) & 0xff)
  }
  return out
}

/** @internal A CIDR block: a network (its host bits zero) and its prefix length. */
export interface Cidr {
  readonly network: Address
  readonly bits: number
}

/**
 * @internal `a.b.c.d/n`, `v6/n`, or a bare address (all of its bits; an IPv6 zone is dropped). IPv4-mapped
 * networks of /96 or longer become IPv4. Throws a `RangeError`, `not an IP address or CIDR block: "<text>"`.
 */
export const parseCidr = (text: string): Cidr => {
  const trimmed = text.trim()
  const slash = trimmed.indexOf("/")
  const addressText = slash < 0 ? trimmed : trimmed.slice(0, slash)
  const bitsText = slash < 0 ? undefined : trimmed.slice(slash + 1)
  const zone = addressText.indexOf("%")
  // A zone names a link, not a network: `fe80::1%eth0` is an address; `fe80::%eth0/64` is refused.
  const raw = zone >= 0 && bitsText !== undefined
    ? undefined
    : addressText.includes(":")
    ? parseIpv6(zone >= 0 ? addressText.slice(0, zone) : addressText)
    : parseIpv4(addressText)
  const bits = bitsText === undefined ? raw?.length === undefined ? NaN : raw.length * 8 : /^\d{1,3}$/.test(bitsText)
    ? Number(bitsText)
    : NaN
  if (raw === undefined || !(bits >= 0 && bits <= raw.length * 8)) {
    throw new RangeError(`not an IP address or CIDR block: ${JSON.stringify(text)}`)
  }
  // Addresses are IPv4 once mapped, so a mapped block of /96 or more is the IPv4 block it maps.
  return isMapped(raw) && bits >= 96
    ? { network: masked(raw.slice(12), bits - 96), bits: bits - 96 }
    : { network: masked(raw, bits), bits }
}

/** @internal Whether the block holds the address (of the same family). */
export const contains = (cidr: Cidr, address: Address): boolean => {
  if (cidr.network.length !== address.length) return false
  const m = masked(address, cidr.bits)
  return m.every((b, i) => b === cidr.network[i])
}

/**
 * @internal A predicate over address texts (as {@link parse} reads them) from a list of addresses and CIDR
 * blocks; throws {@link parseCidr}'s `RangeError` on an entry that is neither.
 */
export const trustList = (entries: ReadonlyArray<string>): (address: string) => boolean => {
  const cidrs = entries.map(parseCidr)
  if (cidrs.length === 0) return () => false
  return (text) => {
    const address = parse(text)
    return address !== undefined && cidrs.some((cidr) => contains(cidr, address))
  }
}
