/**
 * One address and CIDR parser for the command line, `ClientIp` and the proxy : every
 * entry that one of them accepts the others accept, and one that one refuses they all refuse.
 */
import { describe, expect, it } from "vitest"
import { ClientIp } from "wakuwaku/http"
import * as Proxy from "wakuwaku/Proxy"
import { parse } from "../../src/internal/proxy/cli.js"

const accepted = (entry: string) => {
  const cli = parse(["proxy", "--demo", "--trusted-proxies", entry], {})._tag === "Proxy"
  const clientIp = (() => {
    try {
      ClientIp.resolve({ trustedProxies: [entry] })
      return true
    } catch {
      return false
    }
  })()
  const proxy = (() => {
    try {
      Proxy.make({ upstream: "http://127.0.0.1:1", trustedProxies: [entry] })
      return true
    } catch {
      return false
    }
  })()
  return { cli, clientIp, proxy }
}

describe("trusted proxies: the CLI, ClientIp and Proxy.make agree", () => {
  it.each([
    ["::ffff:10.0.0.0/104", true],
    ["fe80::1%eth0", true],
    ["10.0.0.0/8", true],
    ["10.1.2.3", true],
    ["::1", true],
    ["fd00::/8", true],
    ["::ffff:0:0/96", true],
    ["::ffff:1.2.3.4", true],
    ["fe80::%eth0/64", false],
    ["10.0.0.0/33", false],
    ["::/129", false],
    ["010.0.0.1", false],
    ["10.0.0.0/8/8", false],
    ["10.0.0.0/", false],
    ["lb.internal", false],
    ["1.2.3.4:80", false],
    ["[::1]", false]
  ])("%j: accepted %s by all three", (entry, expected) => {
    expect(accepted(entry)).toEqual({ cli: expected, clientIp: expected, proxy: expected })
  })

  it("an IPv4-mapped block trusts the IPv4 addresses it maps; a zoned address trusts that address", () => {
    const resolve = ClientIp.resolve({ trustedProxies: ["::ffff:10.0.0.0/104"] })
    expect(resolve({ remoteAddress: "::ffff:10.9.8.7", headers: { "x-forwarded-for": "203.0.113.5" } })).toBe(
      "203.0.113.5"
    )
    expect(resolve({ remoteAddress: "11.0.0.1", headers: { "x-forwarded-for": "203.0.113.5" } })).toBe("11.0.0.1")
    const zoned = ClientIp.resolve({ trustedProxies: ["fe80::1%eth0"] })
    expect(zoned({ remoteAddress: "fe80::1%eth0", headers: { "x-forwarded-for": "203.0.113.6" } })).toBe(
      "203.0.113.6"
    )
  })
})
