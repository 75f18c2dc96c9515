/**
 * Reloading the proxy's configuration (src/internal/proxy/reload.ts): the swap in this process, under load,
 * through `Proxy.layer`'s reloader; SIGHUP on a `wakuwaku proxy --config FILE` process, which reads its file again.
 * Real upstreams (node:http) and the suite's Redis.
 */
import { Context, Effect, Exit, Layer, Logger, LogLevel, Scope } from "effect"
import { mkdtempSync, writeFileSync } from "node:fs"
import * as Http from "node:http"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterEach, describe, expect, it } from "vitest"
import { Rate, Redis, TokenBucket } from "wakuwaku"
import * as Proxy from "wakuwaku/Proxy"
import * as reload from "../src/internal/proxy/reload.js"
import { layerReloadable } from "../src/internal/proxy/server.js"
import { request, startProxy, upstream, valueOf } from "./support/proxy.js"
import { freshNamespace, redisUrl } from "./support/redis.js"

const cleanups: Array<() => Promise<unknown>> = []
afterEach(async () => {
  await Promise.all(cleanups.splice(0).map((cleanup) => cleanup()))
})

/** An upstream that names itself in `x-upstream` and counts what it answered. */
const namedUpstream = async (name: string, respond?: (res: Http.ServerResponse) => void) => {
  let answered = 0
  const server = await upstream((_, res) => {
    answered++
    res.setHeader("x-upstream", name)
    if (respond === undefined) res.end(name)
    else respond(res)
  })
  cleanups.push(server.close)
  return { ...server, answered: () => answered }
}

/** `Proxy.layer` with its reloader, on a free loopback port and the suite's Redis, until the test ends. */
const serveReloadable = async (options: Omit<Proxy.LayerOptions<Redis.ReadWrite>, "port" | "host">) => {
  const scope = Effect.runSync(Scope.make())
  const context = await Effect.runPromise(
    Layer.buildWithScope(
      layerReloadable<Redis.ReadWrite>({ ...options, port: 0, host: "127.0.0.1", shutdownTimeout: "1 second" }).pipe(
        Layer.provide(Redis.layer({ url: redisUrl })),
        Layer.provide(Logger.minimumLogLevel(LogLevel.None))
      ),
      scope
    )
  )
  cleanups.push(() => Effect.runPromise(Scope.close(scope, Exit.void)))
  const server = Context.get(context, Proxy.Server)
  const reloader = Context.get(context, reload.Reloader)
  return {
    port: server.address.port,
    server,
    reload: (next: Omit<Proxy.LayerOptions<Redis.ReadWrite>, "port" | "host">) =>
      reloader.reload({ ...next, port: 0 } as Proxy.LayerOptions<never>)
  }
}

/** A limit that allows everything: the policy's name tells which configuration answered. */
const allowing = (namespace: string) => TokenBucket.make<string>(namespace, 1_000_000, Rate.perSecond(1_000_000))

/** The policy's name in a response's `RateLimit-Policy`. */
const policyOf = (reply: { readonly headers: ReadonlyArray<readonly [string, string]> }): string | undefined =>
  /^"([^"]+)"/.exec(valueOf(reply as never, "ratelimit-policy") ?? "")?.[1]

describe("reload (in process)", () => {
  it("under load, loses no request and never answers with half of one configuration and half of another", async () => {
    const [u1, u2] = [await namedUpstream("one"), await namedUpstream("two")]
    const ns = freshNamespace("reload")
    /** Generation `g`: its upstream, and each route's policy named after it. */
    const generation = (g: 1 | 2) => {
      const up = g === 1 ? u1 : u2
      return {
        upstream: up.url,
        onStoreFailure: "fail-closed" as const,
        rateLimit: { limiter: allowing(`${ns}-d${g}`), onStoreFailure: "fail-closed" as const },
        routes: [{ name: "r", match: { prefix: "/r" }, limits: [{ limiter: allowing(`${ns}-r${g}`) }] }]
      }
    }
    const configs = { 1: generation(1), 2: generation(2) }
    const proxy = await serveReloadable(configs[1])
    const agent = new Http.Agent({ keepAlive: true, maxSockets: 8 })
    cleanups.push(() => Promise.resolve(agent.destroy()))
    const get = (path: string) =>
      new Promise<{ status: number; upstream: string; policy: string | undefined }>((resolve, reject) => {
        Http.get({ host: "127.0.0.1", port: proxy.port, path, agent }, (res) => {
          res.resume()
          res.on("end", () => {
            const policy = /^"([^"]+)"/.exec(String(res.headers["ratelimit-policy"] ?? ""))?.[1]
            resolve({ status: res.statusCode ?? 0, upstream: String(res.headers["x-upstream"]), policy })
          })
        }).on("error", reject)
      })
    // 8 clients, each sending one request after another, on both routes, while the configuration flips 20 times.
    let reloading = true
    const replies: Array<{ status: number; upstream: string; policy: string | undefined; path: string }> = []
    let sent = 0
    const client = async (i: number) => {
      while (reloading) {
        const path = (sent++ + i) % 2 === 0 ? "/r/x" : "/other"
        replies.push({ ...(await get(path)), path })
      }
    }
    const clients = Array.from({ length: 8 }, (_, i) => client(i))
    for (let flip = 0; flip < 20; flip++) {
      // At least 10 answers between two reloads, so that each configuration serves, and the swap lands under load.
      const seen = replies.length
      while (replies.length < seen + 10) await new Promise((resolve) => setTimeout(resolve, 1))
      proxy.reload(configs[flip % 2 === 0 ? 2 : 1])
    }
    reloading = false
    await Promise.all(clients)
    expect(replies).toHaveLength(sent)
    expect(replies.filter((r) => r.status !== 200)).toEqual([])
    // Each response is one generation's: its upstream and its route's policy agree.
    for (const reply of replies) {
      const g = reply.upstream === "one" ? 1 : 2
      expect(reply.policy).toBe(`${ns}-${reply.path === "/r/x" ? "r" : "d"}${g}`)
    }
    expect(new Set(replies.map((r) => r.upstream))).toEqual(new Set(["one", "two"]))
    expect(u1.answered() + u2.answered()).toBe(sent)
    // The last configuration (generation 1, after 20 flips) answers every request sent after it.
    expect((await get("/r/x")).policy).toBe(`${ns}-r1`)
    expect((await get("/other")).policy).toBe(`${ns}-d1`)
    console.info(`reload under load: ${sent} requests across 20 reloads, none lost, each of one configuration`)
  })

  it("routes left as they were keep their denial memory; a changed route starts afresh", async () => {
    const up = await namedUpstream("one")
    const ns = freshNamespace("keep")
    const once = (name: string) => TokenBucket.make<string>(`${ns}-${name}`, 1, Rate.make(1, "1 hour"))
    const keep = once("keep")
    const before = {
      upstream: up.url,
      onStoreFailure: "fail-closed" as const,
      rememberDenials: 100,
      routes: [
        { name: "keep", match: { prefix: "/keep" }, limits: [{ limiter: keep }] },
        { name: "change", match: { prefix: "/change" }, limits: [{ limiter: once("change") }] }
      ]
    }
    const proxy = await serveReloadable(before)
    for (const path of ["/keep", "/keep", "/change", "/change"]) await request(proxy.port, { path })
    expect(proxy.server.denials()).toBe(2)
    const { kept } = proxy.reload({
      ...before,
      routes: [before.routes[0]!, { ...before.routes[1]!, limits: [{ limiter: once("changed") }] }]
    })
    expect(kept).toEqual(["keep"])
    // The kept route's memory is the same memory: its denial is still remembered; the other's is gone.
    expect(proxy.server.denials()).toBe(1)
    expect((await request(proxy.port, { path: "/keep" })).status).toBe(429)
    expect((await request(proxy.port, { path: "/change" })).status).toBe(200)
  })

  it("requests in flight and waiting their turn finish under the configuration they arrived under", async () => {
    let release = () => {}
    const slow = await namedUpstream("slow", (res) => {
      release = () => res.end("slow")
    })
    const [u1, u2] = [await namedUpstream("one"), await namedUpstream("two")]
    const ns = freshNamespace("flight")
    const bucket = TokenBucket.make<string>(ns, 1, Rate.make(1, "300 millis"))
    const first = {
      upstream: u1.url,
      onStoreFailure: "fail-closed" as const,
      routes: [
        { name: "slow", match: { prefix: "/slow" }, upstream: slow.url },
        {
          name: "wait",
          match: { prefix: "/wait" },
          limits: [{ limiter: bucket }],
          mode: "delay" as const,
          maxWait: "2 seconds" as const
        }
      ]
    }
    const proxy = await serveReloadable(first)
    const inFlight = request(proxy.port, { path: "/slow" })
    expect((await request(proxy.port, { path: "/wait" })).status).toBe(200)
    const waiting = request(proxy.port, { path: "/wait" })
    while (proxy.server.waiting() === 0 || slow.answered() === 0) await new Promise((r) => setTimeout(r, 5))
    // Every route now forwards to the second upstream.
    proxy.reload({
      ...first,
      upstream: u2.url,
      routes: [{ ...first.routes[0]!, upstream: u2.url }, { ...first.routes[1]!, upstream: u2.url }]
    })
    release()
    expect(valueOf(await inFlight, "x-upstream")).toBe("slow")
    expect(valueOf(await waiting, "x-upstream")).toBe("one")
    expect(valueOf(await request(proxy.port, { path: "/slow" }), "x-upstream")).toBe("two")
  })

  it("a configuration the proxy refuses changes nothing", async () => {
    const up = await namedUpstream("one")
    const ns = freshNamespace("refused")
    const options = {
      upstream: up.url,
      rateLimit: { limiter: allowing(ns), onStoreFailure: "fail-closed" as const }
    }
    const proxy = await serveReloadable(options)
    expect(() => proxy.reload({ ...options, routes: [{ name: "no good", match: { prefix: "/x" } }] })).toThrow(
      "wakuwaku/Proxy: routes[0].name must be 1 to 64 letters, digits, '_', '.' or '-', got \"no good\""
    )
    expect(() => proxy.reload({ ...options, maxWaiting: 0 })).toThrow(RangeError)
    const reply = await request(proxy.port, { path: "/x" })
    expect(reply.status).toBe(200)
    expect(policyOf(reply)).toBe(ns)
  })
})

describe("SIGHUP (wakuwaku proxy --config FILE)", () => {
  it("reads the file again: a valid one applies, an invalid one is refused with its problems and the old stays", async () => {
    const up = await namedUpstream("one")
    const dir = mkdtempSync(join(tmpdir(), "wakuwaku-reload-"))
    const file = join(dir, "proxy.json")
    const ns = freshNamespace("hup")
    const write = (capacity: number, extra: object = {}) =>
      writeFileSync(
        file,
        JSON.stringify({
          upstream: up.url,
          redis: redisUrl,
          onStoreFailure: "fail-closed",
          storeTimeout: "5s",
          routes: [{
            name: "api",
            match: { prefix: "/api" },
            limits: [{ name: ns, algorithm: "token-bucket", capacity, refill: "1/1h" }]
          }],
          ...extra
        })
      )
    write(3)
    const proxy = await startProxy(["--config", file])
    cleanups.push(async () => {
      proxy.child.kill("SIGTERM")
      await proxy.exited
    })
    let output = ""
    proxy.child.stdout?.on("data", (chunk: Buffer) => (output += chunk.toString()))
    proxy.child.stderr?.on("data", (chunk: Buffer) => (output += chunk.toString()))
    const logged = (text: string) =>
      new Promise<void>((resolve) => {
        const check = () => output.includes(text) ? resolve() : setTimeout(check, 10)
        check()
      })
    const field = async () => valueOf(await request(proxy.port, { path: "/api" }), "ratelimit-policy")
    expect(await field()).toBe(`"${ns}";q=3;w=10800`)

    write(5)
    proxy.child.kill("SIGHUP")
    await logged(`${file} reloaded: 1 route and the default route`)
    expect(await field()).toBe(`"${ns}";q=5;w=18000`)

    writeFileSync(
      file,
      JSON.stringify({ upstream: up.url, routes: [{ name: "api", match: { prefix: "/api" } }], port: -1 })
    )
    proxy.child.kill("SIGHUP")
    await logged(`${file} refused, the running configuration stays`)
    expect(output).toContain("port: expected a port number from 0 to 65535, got -1")
    expect(await field()).toBe(`"${ns}";q=5;w=18000`)

    write(5, { storeTimeout: "4s" })
    proxy.child.kill("SIGHUP")
    await logged("--store-timeout changed in")
    expect(output).toContain("kept as they were: api")
    // Still alive and serving: SIGHUP never ends it.
    expect(await field()).toBe(`"${ns}";q=5;w=18000`)
  })
})
