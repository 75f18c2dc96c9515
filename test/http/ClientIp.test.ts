/**
 * Client identity, as pure functions: which address keys a request, from the socket address and the
 * forwarding headers, with exact keys. No server needed.
 */
import { isIPv6 } from "node:net"
import { describe, expect, it } from "vitest"
import { ClientIp } from "wakuwaku/http"

const resolve = (
  options: ClientIp.Options | undefined,
  remoteAddress: string | undefined,
  headers: Record<string, string> = {}
) => ClientIp.resolve(options)({ remoteAddress, headers })

describe("ClientIp.normalize", () => {
  it("IPv4 stays as it is", () => {
    expect(ClientIp.normalize("203.0.113.7")).toBe("203.0.113.7")
    expect(ClientIp.normalize("0.0.0.0")).toBe("0.0.0.0")
    expect(ClientIp.normalize("255.255.255.255")).toBe("255.255.255.255")
  })

  it("IPv4-mapped IPv6 becomes IPv4, in either spelling", () => {
    expect(ClientIp.normalize("::ffff:127.0.0.1")).toBe("127.0.0.1")
    expect(ClientIp.normalize("::FFFF:1.2.3.4")).toBe("1.2.3.4")
    expect(ClientIp.normalize("::ffff:102:304")).toBe("1.2.3.4")
    expect(ClientIp.normalize("0:0:0:0:0:ffff:cb00:7107")).toBe("203.0.113.7")
  })

  it("IPv6 is keyed by its /56 prefix by default, in RFC 5952 form", () => {
    expect(ClientIp.normalize("2001:db8:aaaa:bbcc:1:2:3:4")).toBe("2001:db8:aaaa:bb00::/56")
    expect(ClientIp.normalize("2001:DB8:0:1::1")).toBe("2001:db8::/56")
    expect(ClientIp.normalize("2001:db8:0:100::1")).toBe("2001:db8:0:100::/56")
    expect(ClientIp.normalize("::1")).toBe("::/56")
    // IPv4-compatible (deprecated, not mapped) stays IPv6
    expect(ClientIp.normalize("::1.2.3.4")).toBe("::/56")
  })

  it("the IPv6 prefix is configurable", () => {
    const address = "2001:db8:aaaa:bbcc:1:2:3:4"
    expect(ClientIp.normalize(address, { ipv6Prefix: 64 })).toBe("2001:db8:aaaa:bbcc::/64")
    expect(ClientIp.normalize(address, { ipv6Prefix: 48 })).toBe("2001:db8:aaaa::/48")
    expect(ClientIp.normalize(address, { ipv6Prefix: 60 })).toBe("2001:db8:aaaa:bbc0::/60")
    expect(ClientIp.normalize(address, { ipv6Prefix: 128 })).toBe("2001:db8:aaaa:bbcc:1:2:3:4/128")
    expect(ClientIp.normalize(address, { ipv6Prefix: 0 })).toBe("::/0")
  })

  it("compresses the longest run of zero groups, the first on a tie, never a single group", () => {
    const full = { ipv6Prefix: 128 }
    expect(ClientIp.normalize("2001:0db8:0000:0000:0000:0000:0002:0001", full)).toBe("2001:db8::2:1/128")
    expect(ClientIp.normalize("2001:db8:0:0:1:0:0:1", full)).toBe("2001:db8::1:0:0:1/128")
    expect(ClientIp.normalize("2001:db8:0:1:1:1:1:1", full)).toBe("2001:db8:0:1:1:1:1:1/128")
    expect(ClientIp.normalize("0:0:0:0:0:0:0:0", full)).toBe("::/128")
    expect(ClientIp.normalize("1:0:0:0:0:0:0:0", full)).toBe("1::/128")
  })

  it("drops a zone and reads ports and brackets", () => {
    expect(ClientIp.normalize("fe80::1%eth0")).toBe("fe80::/56")
    expect(ClientIp.normalize("203.0.113.7:4711")).toBe("203.0.113.7")
    expect(ClientIp.normalize("[2001:db8::1]:443")).toBe("2001:db8::/56")
    expect(ClientIp.normalize("[2001:db8::1]")).toBe("2001:db8::/56")
  })

  it("rejects what is not an address", () => {
    for (
      const bad of [
        "",
        "unknown",
        "_hidden",
        "1.2.3",
        "1.2.3.4.5",
        "256.1.1.1",
        "01.2.3.4",
        "1::2::3",
        "2001:db8::g",
        "12345::1",
        "[::1",
        "::1]"
      ]
    ) {
      expect(ClientIp.normalize(bad), bad).toBeUndefined()
    }
  })

  it("agrees with node:net on which strings are IPv6 addresses", () => {
    const samples = [
      "::",
      "::1",
      "1::",
      "1:2:3:4:5:6:7:8",
      "1:2:3:4:5:6:7::",
      "::2:3:4:5:6:7:8",
      "1:2:3:4:5:6:1.2.3.4",
      "1::1.2.3.4",
      "1:2:3:4:5:6:7:8:9",
      "1:2:3:4:5:6:7",
      ":1:2:3:4:5:6:7",
      "1:2:3:4:5:6:7:",
      "1:::2",
      "::ffff:1.2.3",
      "a:b:c:d:e:f:0:1"
    ]
    for (const sample of samples) {
      expect(ClientIp.normalize(sample) !== undefined, sample).toBe(isIPv6(sample))
    }
  })
})

describe("ClientIp.resolve with no trust configured", () => {
  it("uses the socket address and ignores X-Forwarded-For and Forwarded", () => {
    expect(resolve(undefined, "::ffff:127.0.0.1", { "x-forwarded-for": "203.0.113.9" })).toBe("127.0.0.1")
    expect(resolve(undefined, "198.51.100.2", { "x-forwarded-for": "203.0.113.9", forwarded: "for=203.0.113.9" }))
      .toBe("198.51.100.2")
    expect(resolve({ trustedProxies: [] }, "198.51.100.2", { "x-forwarded-for": "203.0.113.9" })).toBe("198.51.100.2")
    expect(resolve({ trustedProxies: 0 }, "198.51.100.2", { "x-forwarded-for": "203.0.113.9" })).toBe("198.51.100.2")
  })

  it("keys an IPv6 socket by its prefix", () => {
    expect(resolve(undefined, "2001:db8:0:1::77")).toBe("2001:db8::/56")
    expect(resolve({ ipv6Prefix: 64 }, "2001:db8:0:1::77")).toBe("2001:db8:0:1::/64")
  })

  it("a request with no socket address is keyed \"unknown\"", () => {
    expect(resolve(undefined, undefined)).toBe("unknown")
    expect(ClientIp.UNKNOWN).toBe("unknown")
  })
})

describe("ClientIp.resolve with trusted proxy CIDRs", () => {
  const trust = { trustedProxies: ["10.0.0.0/8", "fd00::/8"] }

  it("skips trusted hops and keys the rightmost untrusted address", () => {
    expect(resolve(trust, "10.1.2.3", { "x-forwarded-for": "203.0.113.7" })).toBe("203.0.113.7")
    expect(resolve(trust, "10.1.2.3", { "x-forwarded-for": "203.0.113.7, 10.0.0.5" })).toBe("203.0.113.7")
    expect(resolve(trust, "fd12::1", { "x-forwarded-for": "2001:db8:0:1::5" })).toBe("2001:db8::/56")
  })

  it("ignores spoofed entries left of the first untrusted address", () => {
    expect(resolve(trust, "10.1.2.3", { "x-forwarded-for": "1.1.1.1, 203.0.113.7" })).toBe("203.0.113.7")
    expect(resolve(trust, "10.1.2.3", { "x-forwarded-for": "10.9.9.9, 1.1.1.1, 203.0.113.7, 10.0.0.5" }))
      .toBe("203.0.113.7")
  })

  it("ignores forwarding headers from a socket that is not trusted", () => {
    expect(resolve(trust, "198.51.100.2", { "x-forwarded-for": "203.0.113.7" })).toBe("198.51.100.2")
    expect(resolve(trust, "::ffff:198.51.100.2", { "x-forwarded-for": "10.0.0.1" })).toBe("198.51.100.2")
  })

  it("a trusted socket with no header keys the socket", () => {
    expect(resolve(trust, "10.1.2.3")).toBe("10.1.2.3")
  })

  it("when every hop is trusted, keys the leftmost", () => {
    expect(resolve(trust, "10.1.2.3", { "x-forwarded-for": "10.0.0.9, 10.0.0.5" })).toBe("10.0.0.9")
  })

  it("an entry that is not an address stops the walk at the trusted hop that reported it", () => {
    expect(resolve(trust, "10.1.2.3", { "x-forwarded-for": "203.0.113.7, garbage, 10.0.0.5" })).toBe("10.0.0.5")
    expect(resolve(trust, "10.1.2.3", { "x-forwarded-for": "203.0.113.7, " })).toBe("10.1.2.3")
  })

  it("matches IPv4-mapped socket addresses against IPv4 CIDRs, and single addresses as /32 and /128", () => {
    const loopback = { trustedProxies: ["127.0.0.1", "::1"] }
    expect(resolve(loopback, "::ffff:127.0.0.1", { "x-forwarded-for": "203.0.113.7" })).toBe("203.0.113.7")
    expect(resolve(loopback, "::1", { "x-forwarded-for": "203.0.113.7" })).toBe("203.0.113.7")
    expect(resolve(loopback, "127.0.0.2", { "x-forwarded-for": "203.0.113.7" })).toBe("127.0.0.2")
    expect(resolve({ trustedProxies: ["::ffff:10.0.0.0/104"] }, "10.1.2.3", { "x-forwarded-for": "203.0.113.7" }))
      .toBe("203.0.113.7")
  })

  it("reads ports in X-Forwarded-For entries", () => {
    expect(resolve(trust, "10.1.2.3", { "x-forwarded-for": "203.0.113.7:4711" })).toBe("203.0.113.7")
    expect(resolve(trust, "10.1.2.3", { "x-forwarded-for": "[2001:db8::1]:80" })).toBe("2001:db8::/56")
  })

  it("reads only the header it was told the proxies maintain", () => {
    expect(resolve(trust, "10.1.2.3", { forwarded: "for=203.0.113.7" })).toBe("10.1.2.3")
    const viaForwarded = { ...trust, header: "forwarded" } as const
    expect(resolve(viaForwarded, "10.1.2.3", { "x-forwarded-for": "203.0.113.7" })).toBe("10.1.2.3")
    expect(resolve(viaForwarded, "10.1.2.3", { forwarded: "for=203.0.113.7" })).toBe("203.0.113.7")
  })
})

describe("ClientIp.resolve with a hop count", () => {
  it("one proxy: the rightmost entry is the client", () => {
    expect(resolve({ trustedProxies: 1 }, "127.0.0.1", { "x-forwarded-for": "1.1.1.1, 203.0.113.7" })).toBe(
      "203.0.113.7"
    )
  })

  it("two proxies: the second entry from the right", () => {
    expect(resolve({ trustedProxies: 2 }, "10.1.2.3", { "x-forwarded-for": "1.1.1.1, 203.0.113.7, 10.0.0.5" }))
      .toBe("203.0.113.7")
  })

  it("a shorter chain keys its leftmost address", () => {
    expect(resolve({ trustedProxies: 2 }, "10.1.2.3", { "x-forwarded-for": "203.0.113.7" })).toBe("203.0.113.7")
    expect(resolve({ trustedProxies: 2 }, "10.1.2.3")).toBe("10.1.2.3")
  })

  it("an entry that is not an address falls back to the nearest address on its right", () => {
    expect(resolve({ trustedProxies: 2 }, "10.1.2.3", { "x-forwarded-for": "unknown, 10.0.0.5" })).toBe("10.0.0.5")
  })
})

describe("ClientIp.resolve with Forwarded (RFC 7239)", () => {
  const forwarded = { trustedProxies: 1, header: "forwarded" } as const

  it("reads quoted, bracketed IPv6 with a port", () => {
    expect(resolve(forwarded, "10.1.2.3", { forwarded: "for=\"[2001:db8::1]:1234\"" })).toBe("2001:db8::/56")
  })

  it("reads the for parameter among others, case-insensitively", () => {
    expect(resolve(forwarded, "10.1.2.3", { forwarded: "for=192.0.2.60;proto=http;by=203.0.113.43" })).toBe(
      "192.0.2.60"
    )
    expect(resolve(forwarded, "10.1.2.3", { forwarded: "proto=https;For=\"192.0.2.61:4711\"" })).toBe("192.0.2.61")
  })

  it("splits elements on commas outside quoted strings", () => {
    expect(resolve(forwarded, "10.1.2.3", { forwarded: "for=1.1.1.1;by=\"a,b\", for=\"198.51.100.17:4711\"" }))
      .toBe("198.51.100.17")
    expect(
      resolve({ ...forwarded, trustedProxies: 2 }, "10.1.2.3", {
        forwarded: "for=198.51.100.17;by=\"x,y\", for=10.0.0.5"
      })
    )
      .toBe("198.51.100.17")
  })

  it("an obfuscated or unknown node is not an address", () => {
    expect(resolve(forwarded, "10.1.2.3", { forwarded: "for=_hidden" })).toBe("10.1.2.3")
    expect(resolve(forwarded, "10.1.2.3", { forwarded: "for=unknown" })).toBe("10.1.2.3")
    expect(resolve(forwarded, "10.1.2.3", { forwarded: "proto=https" })).toBe("10.1.2.3")
  })
})

describe("ClientIp options are checked when made", () => {
  it("throws on a bad CIDR, hop count or prefix", () => {
    expect(() => ClientIp.resolve({ trustedProxies: ["10.0.0.0/33"] })).toThrow(RangeError)
    expect(() => ClientIp.resolve({ trustedProxies: ["nonsense"] })).toThrow(/nonsense/)
    expect(() => ClientIp.resolve({ trustedProxies: ["::/129"] })).toThrow(RangeError)
    expect(() => ClientIp.resolve({ trustedProxies: -1 })).toThrow(RangeError)
    expect(() => ClientIp.resolve({ trustedProxies: 1.5 })).toThrow(RangeError)
    expect(() => ClientIp.resolve({ ipv6Prefix: 129 })).toThrow(RangeError)
    expect(() => ClientIp.normalize("::1", { ipv6Prefix: -1 })).toThrow(RangeError)
  })
})
