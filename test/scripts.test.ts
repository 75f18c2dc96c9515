/**
 * Every script the library runs declares exactly the KEYS it reads, names no key itself, and has a
 * TypeScript twin for the memory backend.
 */
import { readdirSync } from "node:fs"
import { describe, expect, it } from "vitest"
import type { Redis } from "wakuwaku"
import { twinOf } from "../src/internal/memory.js"

const isScript = (u: unknown): u is Redis.Script =>
  typeof u === "object" && u !== null && "lua" in u && "sha1" in u && "keys" in u

const dir = new URL("../src/internal/", import.meta.url)
const scripts: Array<Redis.Script> = []
for (const file of readdirSync(dir).filter((f) => f.endsWith(".ts"))) {
  const module: Record<string, unknown> = await import(new URL(file, dir).href)
  scripts.push(...Object.values(module).filter(isScript))
}

describe("scripts", () => {
  it("are found", () => {
    expect(scripts.map((s) => s.name).sort()).toEqual([
      "FixedWindow.acquire",
      "FixedWindow.acquireMany",
      "FixedWindow.peek",
      "Lock.acquire",
      "Lock.acquireMany",
      "Lock.extend",
      "Lock.extendMany",
      "Lock.release",
      "Lock.releaseMany",
      "Pipe.beat",
      "Pipe.close",
      "Pipe.fetch",
      "Pipe.fetchMany",
      "Pipe.open",
      "Pipe.release",
      "Pipe.renew",
      "Pipe.send",
      "Pipe.sendMany",
      "RwLock.read",
      "RwLock.readExtend",
      "RwLock.readRelease",
      "RwLock.withdraw",
      "RwLock.write",
      "RwLock.writeExtend",
      "RwLock.writeRelease",
      "TokenBucket.acquire",
      "TokenBucket.acquireMany",
      "TokenBucket.peek"
    ])
  })

  it("every one has a TypeScript twin, which the memory backend runs", () => {
    expect(scripts.filter((s) => twinOf(s) === undefined).map((s) => s.name)).toEqual([])
  })

  const many = new Set(scripts.flatMap((s) => s.many ? [s.many] : []))
  const single = scripts.filter((s) => !many.has(s))

  it.each(single.map((s) => [s.name, s] as const))("%s reads exactly KEYS[1..keys]", (_, script) => {
    const used = new Set([...script.lua.matchAll(/KEYS\[(\d+)\]/g)].map((m) => Number(m[1])))
    expect([...used].sort()).toEqual(Array.from({ length: script.keys }, (_, i) => i + 1))
    // No computed key indices, no key built from strings.
    expect(script.lua).not.toMatch(/KEYS\[[^\d]/)
    expect(script.lua).not.toMatch(/@@wakuwaku/)
  })

  it.each([...many].map((s) => [s.name, s] as const))("%s (a batch) reads KEYS only per call i, over #KEYS", (_, script) => {
    expect(script.variadic).toBe(true)
    const indices = [...script.lua.matchAll(/KEYS\[([^\]]+)\]/g)].map((m) => m[1]!)
    expect(indices.length).toBe(script.keys)
    for (const index of indices) expect(index).toMatch(/^\d+ \* \(i - 1\) \+ \d+$/)
    expect(script.lua).toContain(`for i = 1, #KEYS / ${script.keys} do`)
    expect(script.lua).not.toMatch(/@@wakuwaku/)
  })

  it("time comes from the server: every script that needs it reads TIME, none takes it as an argument", () => {
    // Only token comparisons and relative leases (PX / PEXPIRE, which Redis times itself) need no clock.
    expect(scripts.filter((s) => !s.lua.includes("redis.call('TIME')")).map((s) => s.name).sort()).toEqual([
      "Pipe.beat",
      "Pipe.close",
      "Pipe.fetch",
      "Pipe.fetchMany",
      "Pipe.open",
      "Pipe.release",
      "Pipe.renew",
      "Pipe.send",
      "Pipe.sendMany",
      "RwLock.withdraw"
    ])
    // The Lock scripts share their functions; only a grant reads the clock.
    expect(scripts.filter((s) => s.name.startsWith("Lock.")).every((s) => s.lua.match(/redis\.call\('TIME'\)/g)?.length === 1))
      .toBe(true)
  })
})
