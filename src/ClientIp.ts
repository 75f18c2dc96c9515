/**
 * ClientIp: which address a request comes from, for keying a rate limit. Part of `wakuwaku/http`.
 *
 * The address of the socket is the only one a client cannot choose. Forwarding headers
 * (`X-Forwarded-For`, RFC 7239 `Forwarded`) are written by whoever sent the request, so they are
 * believed only for hops that come from proxies you trust:
 *
 * - **No trust configured** (the default): the socket address, and the forwarding headers are
 *   ignored. A spoofed `X-Forwarded-For` never chooses the bucket.
 * - **Trusted CIDRs** (`trustedProxies: ["10.0.0.0/8", "fd00::/8"]`): starting from the socket and
 *   walking leftwards through the header, trusted addresses are skipped; the key is the rightmost
 *   address that is not trusted. Entries left of it were written by the client and are ignored. When
 *   every hop is trusted, the leftmost is used. An entry that is not an address (`unknown`,
 *   `_hidden`, garbage) stops the walk at the trusted hop that reported it.
 * - **A hop count** (`trustedProxies: 2`): exactly that many proxies stand in front of the server; the
 *   socket is the nearest, the client is the `n`-th header entry from the right (the leftmost if the
 *   chain is shorter). This holds only if no client can reach the server except through those
 *   proxies: a client that connects directly can choose its key. Prefer CIDRs.
 *
 * The proxies maintain one header: `header` says which (default `x-forwarded-for`); the other is
 * ignored, since a client could write it freely.
 *
 * **Normalisation.** IPv4-mapped IPv6 (`::ffff:1.2.3.4`, as Node reports IPv4 clients of a dual-stack
 * server) becomes `1.2.3.4`. IPv6 clients are keyed by their network prefix, `/56` by default
 * (`ipv6Prefix`), printed in RFC 5952 form with the prefix length: `2001:db8:0:100::/56`. One
 * subscriber usually holds a whole /56 or /64, so keying single IPv6 addresses would give each client
 * billions of buckets. Ports, brackets and zone ids (`%eth0`) are dropped. A request without a socket
 * address (a Unix socket, a test request) is keyed {@link UNKNOWN}.
 *
 * **Caveats.** Keys are addresses: clients behind one NAT share a bucket. Do not also install
 * `HttpMiddleware.xForwardedHeaders` from `@effect/platform` in front of the rate limit: it replaces
 * the socket address with the leftmost `X-Forwarded-For` entry, which the client chooses.
 *
 * @example
 * ```ts
 * import { ClientIp } from "wakuwaku/http"
 *
 * const behindLoadBalancer = ClientIp.resolve({ trustedProxies: ["10.0.0.0/8"] })
 *
 * // "203.0.113.7": the spoofed leftmost entry is ignored
 * behindLoadBalancer({ remoteAddress: "10.1.2.3", headers: { "x-forwarded-for": "1.1.1.1, 203.0.113.7" } })
 * ```
 *
 * @since 0.1.0
 */
import type * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as internal from "./internal/http/clientIp.js"

/**
 * How to find the client's address.
 *
 * @since 0.1.0
 * @category models
 */
export interface Options {
  /**
   * The proxies in front of the server: addresses and CIDRs (`"10.0.0.0/8"`, `"::1"`), or how many
   * proxies every request passes through. Default: none, and forwarding headers are ignored.
   */
  readonly trustedProxies?: ReadonlyArray<string> | number | undefined
  /** The header the trusted proxies maintain. Default `"x-forwarded-for"`. */
  readonly header?: "x-forwarded-for" | "forwarded" | undefined
  /** How many leading bits key an IPv6 client, 0 to 128. Default 56. */
  readonly ipv6Prefix?: number | undefined
}

/**
 * What {@link resolve} reads: the socket address and the request headers (lowercase names).
 *
 * @since 0.1.0
 * @category models
 */
export interface Input {
  readonly remoteAddress: string | undefined
  readonly headers: Readonly<Record<string, string | undefined>>
}

/**
 * The key of a request without a socket address.
 *
 * @since 0.1.0
 * @category constants
 */
export const UNKNOWN: "unknown" = internal.UNKNOWN

/**
 * The key of one address: IPv4 as a dotted quad, IPv6 as its prefix network (`2001:db8::/56`);
 * `undefined` when the text is not an address. Accepts a port (`1.2.3.4:80`, `[::1]:80`) and a zone.
 * Throws a `RangeError` on a prefix outside 0 to 128.
 *
 * @since 0.1.0
 * @category keys
 */
export const normalize: (
  address: string,
  options?: { readonly ipv6Prefix?: number | undefined }
) => string | undefined = internal.normalize

/**
 * The client's key from a socket address and headers, as the module doc describes. The options are
 * checked now: a bad CIDR, hop count or prefix throws a `RangeError`.
 *
 * @since 0.1.0
 * @category keys
 */
export const resolve: (options?: Options) => (input: Input) => string = internal.resolver

/**
 * {@link resolve} for a server request: its `remoteAddress` and headers.
 *
 * @since 0.1.0
 * @category keys
 */
export const make: (options?: Options) => (request: HttpServerRequest.HttpServerRequest) => string = internal.make
