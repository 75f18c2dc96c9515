/**
 * The import rules of README's "Architecture": the core (Redis, Capability, Script, and the internals they
 * load) loads no structure, no HTTP module, no test tool and no @effect/platform; structures know nothing of
 * HTTP nor of the bridges; a structure's internals are its own; only the bridges load @effect/experimental.
 * Read from the sources' import declarations (type-only ones included: a rule about knowing holds for
 * types too).
 */
import { readdirSync, readFileSync, statSync } from "node:fs"
import { dirname, join, relative, resolve } from "node:path"
import { fileURLToPath } from "node:url"
import ts from "typescript"
import { describe, expect, it } from "vitest"

const src = fileURLToPath(new URL("../src/", import.meta.url))

const walk = (dir: string): Array<string> =>
  readdirSync(dir).flatMap((entry) => {
    const path = join(dir, entry)
    return statSync(path).isDirectory() ? walk(path) : path.endsWith(".ts") ? [path] : []
  })

const modules = walk(src).map((path) => relative(src, path))

/** Each module's imports: relative ones as module paths under src/, packages by name. */
const importsOf = (module: string): Array<string> =>
  [...readFileSync(join(src, module), "utf8").matchAll(/(?:^import[^"]*?from |^export[^"]*?from |import\()"([^"]+)"/gm)]
    .map((match) => match[1]!)
    .map((specifier) =>
      specifier.startsWith(".")
        ? relative(src, resolve(dirname(join(src, module)), specifier)).replace(/\.js$/, ".ts")
        : specifier
    )

const toModule = (module: string, specifier: string) =>
  specifier.startsWith(".")
    ? relative(src, resolve(dirname(join(src, module)), specifier)).replace(/\.js$/, ".ts")
    : specifier

/**
 * The modules that `module` loads when it is evaluated: its static `import` and `export … from`
 * declarations, parsed by the TypeScript compiler, less the type-only ones (`import type`, `export type`).
 * With `verbatimModuleSyntax`, an `import { type A }` whose specifiers are all inline `type` is still
 * emitted (as `import {} from`), so it loads the module and counts; a dynamic `import()` runs later and
 * does not.
 */
const valueImportsOf = (module: string): Array<string> => {
  const file = ts.createSourceFile(module, readFileSync(join(src, module), "utf8"), ts.ScriptTarget.Latest)
  return file.statements.flatMap((statement) => {
    if (ts.isImportDeclaration(statement)) {
      if (statement.importClause?.isTypeOnly) return []
    } else if (ts.isExportDeclaration(statement)) {
      if (statement.isTypeOnly || statement.moduleSpecifier === undefined) return []
      const clause = statement.exportClause
      // `export { type A } from` is elided entirely when every specifier is a type
      if (clause && ts.isNamedExports(clause) && clause.elements.every((element) => element.isTypeOnly)) return []
    } else {
      return []
    }
    const specifier = statement.moduleSpecifier
    return specifier && ts.isStringLiteral(specifier) ? [toModule(module, specifier.text)] : []
  })
}

/** The loops of value imports among the sources: every strongly connected group of more than one module. */
const valueCycles = (): Array<Array<string>> => {
  const edges = new Map(modules.map((module) => [module, valueImportsOf(module).filter((m) => modules.includes(m))]))
  // Tarjan's algorithm
  const index = new Map<string, number>()
  const low = new Map<string, number>()
  const stack: Array<string> = []
  const groups: Array<Array<string>> = []
  const connect = (module: string) => {
    index.set(module, index.size)
    low.set(module, index.get(module)!)
    stack.push(module)
    for (const next of edges.get(module)!) {
      if (!index.has(next)) {
        connect(next)
        low.set(module, Math.min(low.get(module)!, low.get(next)!))
      } else if (stack.includes(next)) {
        low.set(module, Math.min(low.get(module)!, index.get(next)!))
      }
    }
    if (low.get(module) === index.get(module)) {
      const group: Array<string> = []
      let member: string
      do {
        member = stack.pop()!
        group.push(member)
      } while (member !== module)
      if (group.length > 1 || edges.get(module)!.includes(module)) groups.push(group.sort())
    }
  }
  for (const module of modules) if (!index.has(module)) connect(module)
  return groups
}

/** Everything `roots` load, themselves included. */
const closure = (roots: ReadonlyArray<string>): Set<string> => {
  const seen = new Set<string>()
  const visit = (module: string) => {
    if (seen.has(module)) return
    seen.add(module)
    if (modules.includes(module)) importsOf(module).forEach(visit)
  }
  roots.forEach(visit)
  return seen
}

const STRUCTURES = ["TokenBucket", "FixedWindow", "SlidingWindow", "Lock", "RwLock", "Pipe", "Semaphore"]
const HTTP = ["http.ts", "RateLimit.ts", "ClientIp.ts", "Proxy.ts", "bin.ts"]
const isHttp = (module: string) =>
  HTTP.includes(module) || module.startsWith("internal/http/") || module.startsWith("internal/proxy/") ||
  module.startsWith("@effect/platform")
/** The bridges to other libraries' contracts, by subpath only: they load @effect/experimental. */
const BRIDGES = ["RateLimiterStore.ts", "internal/rateLimiterStore.ts"]
const isBridge = (module: string) => BRIDGES.includes(module) || module.startsWith("@effect/experimental")
const isTesting = (module: string) =>
  module === "testing.ts" || module === "RedisServer.ts" || module === "internal/redisServer.ts" ||
  module.startsWith("internal/redisServer/")
const internalsOf = (structure: string) => {
  const own = structure[0]!.toLowerCase() + structure.slice(1)
  return (module: string) => module === `internal/${own}.ts` || module.startsWith(`internal/${own}/`)
}
const isStructure = (module: string) =>
  STRUCTURES.some((structure) => module === `${structure}.ts` || internalsOf(structure)(module))

describe("architecture: the import rules", () => {
  it("the sources are found, and every structure is known", () => {
    expect(modules).toContain("Redis.ts")
    for (const structure of STRUCTURES) expect(modules).toContain(`${structure}.ts`)
    const facades = modules.filter((module) => !module.includes("/") && module !== "index.ts")
    const known = new Set([
      ...STRUCTURES.map((structure) => `${structure}.ts`),
      ...HTTP,
      "testing.ts",
      "RedisServer.ts",
      "RateLimiterStore.ts",
      "Redis.ts",
      "Capability.ts",
      "Script.ts",
      "Telemetry.ts",
      "Admission.ts",
      "Limiter.ts",
      "Rate.ts",
      "Limits.ts"
    ])
    // A new public module must be placed in one of these groups (and in README's Architecture).
    expect(facades.filter((module) => !known.has(module))).toEqual([])
  })

  it("the core (Redis, Capability, Script) loads no structure, no HTTP, no bridge, no test tool, no @effect/platform", () => {
    const loaded = [...closure(["Redis.ts", "Capability.ts", "Script.ts"])]
    expect(loaded.filter((module) => isStructure(module) || isHttp(module) || isBridge(module) || isTesting(module)))
      .toEqual([])
  })

  it("the root index loads no HTTP module, no bridge, no test tool, no @effect/platform, no @effect/experimental", () => {
    const loaded = [...closure(["index.ts"])]
    expect(loaded.filter((module) => isHttp(module) || isBridge(module) || isTesting(module))).toEqual([])
  })

  it("structures know nothing of HTTP, nor of the bridges, nor of the test tools", () => {
    for (const structure of STRUCTURES) {
      const loaded = [...closure([`${structure}.ts`])]
      expect(loaded.filter((module) => isHttp(module) || isBridge(module) || isTesting(module)), structure).toEqual([])
    }
  })

  it("only the bridges load @effect/experimental, and they know nothing of HTTP", () => {
    const loaders = modules.filter((module) => importsOf(module).some((m) => m.startsWith("@effect/experimental")))
    expect(loaders.sort()).toEqual([...BRIDGES].sort())
    const loaded = [...closure(["RateLimiterStore.ts"])]
    expect(loaded).toContain("@effect/experimental/RateLimiter")
    expect(loaded.filter((module) => isHttp(module) || isTesting(module))).toEqual([])
  })

  it("no value-import cycle: an internal module imports its public module for types only", () => {
    expect(valueImportsOf("Redis.ts")).toContain("internal/redis.ts")
    expect(valueCycles()).toEqual([])
  })

  it("a structure's internals are loaded only by itself", () => {
    for (const structure of STRUCTURES) {
      const own = internalsOf(structure)
      const strangers = modules.filter((module) =>
        module !== `${structure}.ts` && !own(module) && importsOf(module).some(own)
      )
      expect(strangers, structure).toEqual([])
    }
  })
})
