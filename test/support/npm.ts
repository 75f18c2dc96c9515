/** What test/package.test.ts needs to install the packed package as a user would: npm, README's commands, engines. */
import { execFile } from "node:child_process"
import { existsSync, mkdirSync } from "node:fs"
import { dirname, join } from "node:path"

/** A command's outcome, failed or not: tsc reports errors on stdout with a non-zero exit code. */
export interface Outcome {
  readonly code: number
  readonly stdout: string
  readonly stderr: string
}

/** Runs a command to its end; never rejects, so a test can assert on the output of a failure. */
export const exec = (
  file: string,
  args: ReadonlyArray<string>,
  options: { readonly cwd: string; readonly env?: NodeJS.ProcessEnv }
): Promise<Outcome> =>
  new Promise((resolve) => {
    execFile(file, args, { ...options, maxBuffer: 64 * 1024 * 1024 }, (error, stdout, stderr) => {
      const code = error === null ? 0 : typeof error.code === "number" ? error.code : 1
      resolve({ code, stdout, stderr })
    })
  })

/**
 * The environment of a child npm: the default npm cache (where `npm ci` already put most packages), used
 * without revalidating what it holds (`prefer-offline`: missing data still comes from the registry), and
 * no audit, fund or update notice. The variables vitest sets for its own workers are dropped, so that a
 * vitest started in the fresh project is a run of its own.
 */
export const npmEnv = (): NodeJS.ProcessEnv => ({
  ...Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith("VITEST"))),
  npm_config_prefer_offline: "true",
  npm_config_audit: "false",
  npm_config_fund: "false",
  npm_config_update_notifier: "false"
})

/** Runs npm; rejects with its output when it fails. */
export const npm = async (args: ReadonlyArray<string>, cwd: string): Promise<Outcome> => {
  const outcome = await exec("npm", args, { cwd, env: npmEnv() })
  if (outcome.code !== 0) throw new Error(`npm ${args.join(" ")} failed (${outcome.code}):\n${outcome.stderr}`)
  return outcome
}

/** A section of a markdown file: from its `## title` heading to the next `## ` heading. */
export const section = (markdown: string, title: string): string => {
  const found = new RegExp(`^## ${title}\\n([\\s\\S]*?)(?=^## |(?![\\s\\S]))`, "m").exec(markdown)
  if (found === null) throw new Error(`no "## ${title}" section`)
  return found[1]!
}

/** The code of the fenced blocks of one language, in order. */
export const fencedBlocks = (markdown: string, lang: string): Array<string> =>
  [...markdown.matchAll(new RegExp(`^\`\`\`${lang}\\n([\\s\\S]*?)^\`\`\`$`, "gm"))].map((block) => block[1]!)

/** The commands of README's Install section, one per line of its ```sh blocks, each split into words. */
export const installCommands = (readme: string): Array<Array<string>> =>
  fencedBlocks(section(readme, "Install"), "sh").flatMap((block) =>
    block.split("\n").filter((line) => line.trim() !== "").map((line) => line.trim().split(/\s+/))
  )

/**
 * A fresh project: an empty `dir`, where `commands` run as written (they make its package.json), with
 * `tarball` in place of the registry's `wakuwaku`. Nothing above `dir` may hold a package.json, where npm
 * would install instead, or a node_modules, which would supply a package that the install left out.
 */
export const installAsWritten = async (
  dir: string,
  commands: ReadonlyArray<ReadonlyArray<string>>,
  tarball: string
): Promise<void> => {
  const above = ancestorProjects(dir)
  if (above.length > 0) throw new Error(`a package.json or node_modules above the fresh project: ${above.join(", ")}`)
  mkdirSync(dir)
  for (const [command, ...args] of commands) {
    if (command !== "npm") throw new Error(`README's Install section runs ${command}, not npm`)
    await npm(args.map((arg) => arg === "wakuwaku" ? tarball : arg), dir)
  }
}

/** The TypeScript installed in `dir` under the name `name`, over `dir`'s tsconfig.json, plain output. */
export const tsc = (dir: string, name: string, ...flags: Array<string>): Promise<Outcome> =>
  exec(process.execPath, [join(dir, "node_modules", name, "bin", "tsc"), "-p", dir, "--pretty", "false", ...flags], {
    cwd: dir
  })

/** A relative link of a markdown file: its path (empty for the page itself) and its `#fragment`, if any. */
export interface Link {
  readonly path: string
  readonly fragment: string | undefined
}

/** The relative links of a markdown file (fenced code left out), same-page `#fragment` links included. */
export const relativeLinks = (markdown: string): Array<Link> =>
  [...withoutFences(markdown).matchAll(/\]\(([^)\s]+)\)/g)]
    .map((link) => link[1]!)
    .filter((target) => !/^[a-z][a-z0-9+.-]*:/i.test(target))
    .map((target) => {
      const at = target.indexOf("#")
      return at === -1
        ? { path: target, fragment: undefined }
        : { path: target.slice(0, at), fragment: target.slice(at + 1) }
    })

/**
 * The anchors of a markdown file's headings as GitHub and npm's registry page make them: lower case, inline
 * markup and punctuation dropped (letters, digits, `_` and `-` kept), each space a `-`, and a repeated
 * anchor numbered (`-1`, `-2`, …).
 */
export const headingAnchors = (markdown: string): Set<string> => {
  const seen = new Map<string, number>()
  const anchors = new Set<string>()
  for (const [, text = ""] of withoutFences(markdown).matchAll(/^#{1,6}[ \t]+(.*?)[ \t#]*$/gm)) {
    const slug = text.toLowerCase().replace(/<[^>]+>/g, "").replace(/[^\p{L}\p{N}\s_-]/gu, "").replace(/\s/g, "-")
    const count = seen.get(slug) ?? 0
    seen.set(slug, count + 1)
    anchors.add(count === 0 ? slug : `${slug}-${count}`)
  }
  return anchors
}

const withoutFences = (markdown: string): string => markdown.replace(/^(`{3,}|~{3,})[\s\S]*?^\1\s*$/gm, "")

/** The directories above `dir` that hold a package.json or a node_modules: npm, Node and TypeScript look there. */
export const ancestorProjects = (dir: string): Array<string> => {
  const found: Array<string> = []
  for (let up = dirname(dir); up !== dirname(up); up = dirname(up)) {
    if (existsSync(join(up, "package.json")) || existsSync(join(up, "node_modules"))) found.push(up)
  }
  return found
}

type Version = readonly [number, number, number]

const compare = (a: Version, b: Version) => a[0] - b[0] || a[1] - b[1] || a[2] - b[2]

/** The version just above every one a partial version names: 20 → 21.0.0, 13.7 → 13.8.0. */
const above = (given: ReadonlyArray<number>, at = given.length - 1): Version => {
  const bumped = [...given.slice(0, at), given[at]! + 1, 0, 0, 0]
  return [bumped[0]!, bumped[1]!, bumped[2]!]
}

const comparator = (version: Version, text: string): boolean => {
  const found = /^(>=|<=|>|<|=|\^|~)?v?(\d+|[*xX])(?:\.(\d+|[*xX]))?(?:\.(\d+|[*xX]))?$/.exec(text)
  if (found === null) throw new Error(`an engines comparator this check cannot read: ${text}`)
  const [, op = "=", ...raw] = found
  const given: Array<number> = []
  for (const part of raw) {
    if (part === undefined || /^[*xX]$/.test(part)) break
    given.push(Number(part))
  }
  if (given.length === 0) return op !== "<" && op !== ">"
  const floor: Version = [given[0] ?? 0, given[1] ?? 0, given[2] ?? 0]
  const exact = given.length === 3
  const atLeast = compare(version, floor) >= 0
  switch (op) {
    case ">=":
      return atLeast
    case ">":
      return exact ? compare(version, floor) > 0 : compare(version, above(given)) >= 0
    case "<":
      return !atLeast
    case "<=":
      return exact ? compare(version, floor) <= 0 : compare(version, above(given)) < 0
    case "^": {
      const first = given.findIndex((n) => n !== 0)
      return atLeast && compare(version, above(given, first === -1 ? given.length - 1 : first)) < 0
    }
    case "~":
      return atLeast && compare(version, above(given, Math.min(1, given.length - 1))) < 0
    default:
      return exact ? compare(version, floor) === 0 : atLeast && compare(version, above(given)) < 0
  }
}

/**
 * Whether a version satisfies a range as npm reads `engines` and dependency ranges: alternatives joined by
 * `||`, each of comparators (`>=`, `>`, `<=`, `<`, `=`, `^`, `~` or none) over versions that may be
 * partial (`20`, `13.7`, `10.x`, `*`). Pre-releases and hyphen ranges are not read (none occur here).
 */
export const satisfies = (version: string, range: string): boolean => {
  const [major = 0, minor = 0, patch = 0] = version.replace(/^v/, "").split(".").map(Number)
  const parsed: Version = [major, minor, patch]
  return range.split("||").some((alternative) =>
    alternative.trim().replace(/(>=|<=|>|<|=|\^|~)\s+/g, "$1").split(/\s+/).filter((c) => c !== "")
      .every((c) => comparator(parsed, c))
  )
}
