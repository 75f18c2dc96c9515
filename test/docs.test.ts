/**
 * The project and its docs compile, in one TypeScript program: every file of tsconfig.json (src, the tests
 * with their type tests, docs/examples), every ```ts block in README.md and docs/**\/*.md, and every ```ts
 * block of an `@example` in src, each block written out as a module of its own, all under the options of
 * tsconfig.json. (One program, where `npm test` used to build two: `tsc --noEmit` first, then this one
 * over the same sources and types.) The same program holds a few snippets that must not compile, and
 * checks that their errors say what the docs promise. The lint reads the same program: ESLint's
 * type-aware rules use it rather than build their own (a second whole-project program cost about 30 s of
 * CPU). It runs in a child process (support/typecheck.ts), so that its tens of seconds of one core block no
 * test worker.
 *
 * A block that is meant not to compile uses another fence (```text), or marks the failing line with
 * `// @ts-expect-error`.
 */
import { execFile } from "node:child_process"
import { randomBytes } from "node:crypto"
import { existsSync, mkdirSync, readdirSync, readFileSync, rmdirSync, rmSync, writeFileSync } from "node:fs"
import { join, relative, resolve } from "node:path"
import { fileURLToPath } from "node:url"
import { promisify } from "node:util"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { nodeArgs } from "./support/spawn.js"

const ROOT = fileURLToPath(new URL("..", import.meta.url))
const TMP_ROOT = join(ROOT, "test", ".docs-tmp")
const TMP = join(TMP_ROOT, `run-${process.pid}-${randomBytes(4).toString("hex")}`)

/** A code block: where it came from and its source. `line` is the 1-based line of its first code line. */
interface Block {
  readonly source: string
  readonly line: number
  readonly code: string
}

const OPEN = /^(\s*)(`{3,}|~{3,})\s*([^\s`]*)/

/** The ```ts (or ```typescript) blocks of markdown lines; `firstLine` is the 1-based number of `lines[0]`. */
const tsBlocks = (source: string, lines: ReadonlyArray<string>, firstLine: number): Array<Block> => {
  const blocks: Array<Block> = []
  for (let i = 0; i < lines.length; i++) {
    const open = OPEN.exec(lines[i] ?? "")
    if (open === null) continue
    const [, indent = "", fence = "", lang = ""] = open
    // Closed by a line of at least as many of the same fence character, and nothing else.
    const close = new RegExp(`^\\s*\\${fence[0]}{${fence.length},}\\s*$`)
    const body: Array<string> = []
    let j = i + 1
    for (; j < lines.length && !close.test(lines[j] ?? ""); j++) {
      const line = lines[j] ?? ""
      body.push(line.startsWith(indent) ? line.slice(indent.length) : line.trimStart())
    }
    if (lang === "ts" || lang === "typescript") blocks.push({ source, line: firstLine + i + 1, code: body.join("\n") })
    i = j
  }
  return blocks
}

const walk = (dir: string, keep: (file: string) => boolean): Array<string> =>
  existsSync(dir)
    ? readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
      const path = join(dir, entry.name)
      if (entry.isDirectory()) {
        return entry.name === "node_modules" || entry.name.startsWith(".")
          ? []
          : walk(path, keep)
      }
      return keep(path) ? [path] : []
    }).sort()
    : []

const markdownBlocks = (file: string): Array<Block> =>
  tsBlocks(relative(ROOT, file), readFileSync(file, "utf8").split(/\r?\n/), 1)

/** The ```ts blocks inside the `@example` tags of a source file's JSDoc comments, with ` * ` stripped. */
const exampleBlocks = (file: string): Array<Block> => {
  const text = readFileSync(file, "utf8")
  const blocks: Array<Block> = []
  for (const comment of text.matchAll(/\/\*\*[\s\S]*?\*\//g)) {
    const startLine = text.slice(0, comment.index).split("\n").length
    const lines = comment[0].split("\n").map((line) =>
      line.replace(/^\s*\/\*\*\s?/, "").replace(/\s*\*\/\s*$/, "").replace(/^\s*\*(?: |$)/, "")
    )
    for (let i = 0; i < lines.length; i++) {
      if (!/^@example\b/.test(lines[i] ?? "")) continue
      let end = i + 1
      while (end < lines.length && !/^@\w/.test(lines[end] ?? "")) end++
      blocks.push(...tsBlocks(relative(ROOT, file), lines.slice(i + 1, end), startLine + i + 1))
      i = end - 1
    }
  }
  return blocks
}

const blocks: ReadonlyArray<Block> = [
  ...[join(ROOT, "README.md")].filter(existsSync).flatMap(markdownBlocks),
  ...walk(join(ROOT, "docs"), (file) => file.endsWith(".md")).flatMap(markdownBlocks),
  ...walk(join(ROOT, "src"), (file) => file.endsWith(".ts") && !file.endsWith(".d.ts")).flatMap(exampleBlocks)
]

/** Snippets that must not compile, and what their one error must say. */
const negatives = [
  {
    name: "Rate.make(0, …)",
    expected: "a rate must refill at least one token",
    code: `import { Rate } from "wakuwaku"
export const rate = Rate.make(0, "3 seconds")`
  },
  {
    name: "Rate.make(1, \"0 seconds\")",
    expected: "a rate's period must be longer than zero",
    code: `import { Rate } from "wakuwaku"
export const rate = Rate.make(1, "0 seconds")`
  },
  {
    name: "acquire with only Redis.layerReadOnly",
    expected: `Write<Entity<"TokenBucket">>`,
    code: `import { Effect } from "effect"
import { Rate, Redis, TokenBucket } from "wakuwaku"
const LOGINS = TokenBucket.make<string>("login", 20, Rate.make(1, "3 seconds"))
LOGINS.acquire("x", 1).pipe(Effect.provide(Redis.layerReadOnly({ url: "redis://127.0.0.1:1" })), Effect.runPromise)`
  },
  {
    name: "a conditional grant list: only what both branches grant",
    expected: `Write<Entity<"FixedWindow">>`,
    code: `import { Effect } from "effect"
import { Capability, FixedWindow, Redis, TokenBucket } from "wakuwaku"
declare const strict: boolean
const SIGNUPS = FixedWindow.make<string>("signup", 5, "1 minute")
const Limiters = Capability.layer({ write: strict ? [TokenBucket.entity] : [TokenBucket.entity, FixedWindow.entity] })
SIGNUPS.acquire("x", 1).pipe(Effect.provide(Limiters), Effect.provide(Redis.layerMemoryReadOnly()), Effect.runPromise)`
  },
  {
    name: "Capability.layer of an array type",
    expected: "a grant list must be a tuple (inline, or `as const`): an array type does not say what it holds",
    code: `import { Capability, TokenBucket } from "wakuwaku"
const write = [TokenBucket.entity]
export const Limiters = Capability.layer({ write })`
  },
  {
    name: "Capability.entity of a union of kinds",
    expected: "an entity's kind must be one string literal, not a union",
    code: `import { Capability } from "wakuwaku"
export const Either = Capability.entity<"A" | "B">("A")`
  }
] as const

const label = (block: Block) => `${block.source}:${block.line}`
const blockFile = (index: number) => join(TMP, `block-${index}.ts`)
const negativeFile = (index: number) => join(TMP, `negative-${index}.ts`)

/** A diagnostic as support/typecheck.ts prints it: `file` absolute ("" for none), `line` and `character` 0-based. */
interface Diagnostic {
  readonly file: string
  readonly line: number
  readonly character: number
  readonly code: number
  readonly message: string
}

/** Diagnostics per file name (`""` for those without a file), and the project's files, filled once by the compile. */
const diagnostics = new Map<string, Array<Diagnostic>>()
const project: { fileNames: ReadonlyArray<string>; lint: ReadonlyArray<string> | undefined } = {
  fileNames: [],
  lint: undefined
}

/** "'x' is declared but its value is never read" and its kin: a block may import what only its prose uses. */
const UNUSED = new Set([6133, 6138, 6192, 6196, 6198, 6199, 6205])

const compile = async () => {
  mkdirSync(TMP, { recursive: true })
  const roots: Array<string> = []
  blocks.forEach((block, i) => {
    // `export {}` keeps every block a module of its own, whatever it contains.
    writeFileSync(blockFile(i), `${block.code}\nexport {}\n`)
    roots.push(blockFile(i))
  })
  negatives.forEach((negative, i) => {
    writeFileSync(negativeFile(i), `${negative.code}\nexport {}\n`)
    roots.push(negativeFile(i))
  })
  const request = join(TMP, "roots.json")
  writeFileSync(request, JSON.stringify({ root: ROOT, roots }))
  const { stdout } = await promisify(execFile)(process.execPath, [...nodeArgs("test/support/typecheck.ts"), request], {
    cwd: ROOT,
    maxBuffer: 64 * 1024 * 1024
  })
  const result = JSON.parse(stdout) as {
    fileNames: Array<string>
    diagnostics: Array<Diagnostic>
    lint: Array<string>
  }
  project.fileNames = result.fileNames
  project.lint = result.lint
  for (const diagnostic of result.diagnostics) {
    if (UNUSED.has(diagnostic.code) && diagnostic.file.startsWith(TMP)) continue
    diagnostics.set(diagnostic.file, [...(diagnostics.get(diagnostic.file) ?? []), diagnostic])
  }
}

/** `file:line:col TS1234 message`, with a block's positions mapped back to its markdown or source file. */
const format = (diagnostic: Diagnostic, block?: Block): string => {
  const { character, file, line } = diagnostic
  const text = `TS${diagnostic.code} ${diagnostic.message}`
  if (file === "") return `(global) ${text}`
  return block === undefined
    ? `${relative(ROOT, file)}:${line + 1}:${character + 1} ${text}`
    : `${block.source}:${block.line + line}:${character + 1} (block at ${label(block)}) ${text}`
}

describe("docs", { timeout: 60_000 }, () => {
  // A whole program of one core: over a minute on a loaded 2-core machine.
  beforeAll(compile, 240_000)

  afterAll(() => {
    rmSync(TMP, { recursive: true, force: true })
    try {
      rmdirSync(TMP_ROOT) // only when no other run is using it
    } catch {
      // not empty, or already gone
    }
  })

  it("has ts blocks to check", () => {
    const sources = new Set(blocks.map((block) => block.source))
    expect(sources).toContain("README.md")
    expect(sources).toContain(join("docs", "token-bucket.md"))
  })

  it.each(blocks.map((block, i) => ({ block, i, name: label(block) })))("$name type-checks", ({ block, i }) => {
    const found = diagnostics.get(resolve(blockFile(i))) ?? []
    expect(found.map((diagnostic) => format(diagnostic, block))).toEqual([])
  })

  it("the program holds the whole project: src, the tests and their type tests, docs/examples", () => {
    const names = project.fileNames.map((file) => relative(ROOT, file).replaceAll("\\", "/"))
    for (const file of ["src/index.ts", "test/docs.test.ts", "test/Capability.test-d.ts", "docs/examples/login.ts"]) {
      expect(names, file).toContain(file)
    }
  })

  it("leaves nothing else with errors: the project's every file, under tsconfig.json's options", () => {
    const mine = new Set([
      ...blocks.map((_, i) => resolve(blockFile(i))),
      ...negatives.map((_, i) => resolve(negativeFile(i)))
    ])
    const others = [...diagnostics].filter(([file]) => !mine.has(file)).flatMap(([, found]) => found)
    expect(others.map((diagnostic) => format(diagnostic))).toEqual([])
  })

  it("lint: ESLint over the project (.eslint.config.mjs, as `npm run lint`) reports nothing, its type-aware rules on this program", () => {
    expect(project.lint).toEqual([])
  })

  it.each(negatives.map((negative, i) => ({ ...negative, i })))(
    "$name does not compile: $expected",
    ({ expected, i }) => {
      const found = diagnostics.get(resolve(negativeFile(i))) ?? []
      expect(found.map((diagnostic) => format(diagnostic))).toHaveLength(1)
      expect(found[0]!.message).toContain(expected)
    }
  )
})
