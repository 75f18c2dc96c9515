/**
 * @internal The command line of `wakuwaku`: flags and environment variables, read into a checked
 * configuration, with the help texts. Pure, and free of @effect/platform, so that `--help` and bad
 * flags answer without loading the server.
 */
import * as Duration from "effect/Duration"
import * as Either from "effect/Either"
import { readFileSync } from "node:fs"
import { availableParallelism } from "node:os"
import { parseArgs, type ParseArgsConfig } from "node:util"
import * as Wakuwaku from "../../index.js"
import { parseText } from "../duration.js"
import { parseCidr } from "../http/address.js"
import { canReserve } from "../http/decision.js"
import * as failure from "../http/failure.js"
import { validateNamespace } from "../key.js"
import * as limiterKinds from "../limiter.js"
import { parseRedisUrl } from "../url.js"
import * as configFile from "./config.js"
import { parseUpstream } from "./target.js"

/** @internal The checked configuration of `wakuwaku proxy`. */
export interface Config {
  readonly host: string | undefined
  readonly port: number
  /** An upstream URL, or `demo`: start the built-in demo upstream and forward to it. */
  readonly upstream: { readonly _tag: "Url"; readonly url: string } | { readonly _tag: "Demo" }
  readonly timeout: Duration.Duration
  readonly shutdownTimeout: Duration.Duration
  /** The algorithm, its parameters read from its flags, and how it makes the limiter. */
  readonly limiter: limiterKinds.Configured
  readonly key: { readonly _tag: "ip" } | { readonly _tag: "header"; readonly name: string }
  readonly trustedProxies: ReadonlyArray<string> | number
  readonly ipv6Prefix: number
  readonly namespace: string
  /** A Redis URL; none for the embedded store. */
  readonly redis: string | undefined
  readonly storeTimeout: Duration.Duration
  readonly onStoreFailure: failure.Mode
  readonly maxEntries: number
  /** How many names' denials the proxy remembers (0: none). */
  readonly rememberDenials: number
  /** The admin port (`/metrics`, `/healthz`, `/readyz`), if asked for. */
  readonly admin: { readonly port: number; readonly host: string; readonly drainDelay: Duration.Duration } | undefined
  /** The access log (JSON lines on stdout), if asked for; `query`: with each request's query string. */
  readonly accessLog: { readonly query: boolean } | undefined
  /** In delay mode, the most requests the process holds waiting (past it, 503). */
  readonly maxWaiting: number
  /** How many processes serve the port (`--workers`; `auto`: one per core): 1, or more with `redis`. */
  readonly workers: number
  /** The configuration file read (`--config`), if any. */
  readonly configFile: string | undefined
  /** The routes, tried in order before the default route: the file's (none without a file). */
  readonly routes: ReadonlyArray<configFile.Route>
  /**
   * The default route, `default`: the file's, or, without a file, the flags' one limit (`limiter`, `key`,
   * `namespace`), as the proxy had before it had routes.
   */
  readonly defaultRoute: configFile.Route
}

/** @internal What the command line asks for. */
export type Command =
  | { readonly _tag: "Help"; readonly text: string }
  /**
   * `code`: 2 for a bad command line or configuration file, 1 for a misconfigured store (its URL), as a wrong
   * password is at start, and for any problem under `--check-config` (as `nginx -t`).
   */
  | { readonly _tag: "Invalid"; readonly message: string; readonly code: 1 | 2 }
  | { readonly _tag: "Proxy"; readonly config: Config }
  /** `--check-config FILE`, valid: what it holds, for stdout (exit code 0). */
  | { readonly _tag: "Check"; readonly text: string; readonly config: Config }

interface Flag {
  /** The name after `--`. */
  readonly name: string
  /** What follows the flag in the help (none: a switch). */
  readonly value?: string
  /** The environment variable read when the flag is not given. */
  readonly env: string
  /** The default, as the help shows it. */
  readonly default?: string
  readonly help: string
}

/** The default algorithm. */
const DEFAULT_ALGORITHM = "token-bucket"

/**
 * The algorithms: one per limiter kind the package exports (each kind's module contributes its own, with
 * its flags), the default first.
 */
const ALGORITHMS = limiterKinds.algorithmsOf(Wakuwaku, DEFAULT_ALGORITHM)

/** `a`, `a or b`, `a, b or c`. */
const orList = (words: ReadonlyArray<string>): string =>
  words.length < 2 ? words.join("") : `${words.slice(0, -1).join(", ")} or ${words[words.length - 1]}`

/** Each algorithm flag's name, definition, and the algorithms that read it (a flag two share is one flag). */
const ALGORITHM_FLAGS: ReadonlyMap<string, { readonly flag: limiterKinds.Flag<unknown>; readonly by: Array<string> }> =
  (() => {
    const flags = new Map<string, { readonly flag: limiterKinds.Flag<unknown>; readonly by: Array<string> }>()
    for (const algorithm of ALGORITHMS) {
      for (const [name, flag] of Object.entries<limiterKinds.Flag<unknown>>(algorithm.flags)) {
        const known = flags.get(name)
        if (known === undefined) flags.set(name, { flag, by: [algorithm.name] })
        else if (known.flag.env !== flag.env || known.flag.default !== flag.default) {
          throw new Error(`wakuwaku: --${name} of ${algorithm.name} differs from --${name} of ${known.by[0]}`)
        } else known.by.push(algorithm.name)
      }
    }
    return flags
  })()

const SECTIONS: ReadonlyArray<{ readonly title: string; readonly flags: ReadonlyArray<Flag> }> = [
  {
    title: "Listening",
    flags: [
      { name: "host", value: "ADDRESS", env: "WAKUWAKU_HOST", help: "address to listen on (default: every interface)" },
      {
        name: "port",
        value: "PORT",
        env: "WAKUWAKU_PORT",
        default: "8080",
        help: "port to listen on; 0 picks a free one"
      },
      {
        name: "shutdown-timeout",
        value: "DURATION",
        env: "WAKUWAKU_SHUTDOWN_TIMEOUT",
        default: "10s",
        help: "on SIGINT/SIGTERM, how long in-flight requests may finish"
      },
      {
        name: "workers",
        value: "N",
        env: "WAKUWAKU_WORKERS",
        default: "1",
        help: "processes serving the port (node:cluster), or auto (one per core);\n" +
          "more than 1 shares the limits through --redis, and needs it;\n" +
          "one --admin-port for them all, whose /metrics adds theirs up"
      }
    ]
  },
  {
    title: "Upstream",
    flags: [
      {
        name: "upstream",
        value: "URL",
        env: "WAKUWAKU_UPSTREAM",
        help: "the service to forward to (http:// or https://)"
      },
      {
        name: "demo",
        env: "WAKUWAKU_DEMO",
        help: "start a built-in demo upstream on a loopback port and forward to it"
      },
      {
        name: "timeout",
        value: "DURATION",
        env: "WAKUWAKU_TIMEOUT",
        default: "30s",
        help: "how long the upstream has to start its response (then 504)"
      }
    ]
  },
  {
    title: "Rate limit",
    flags: [
      {
        name: "algorithm",
        value: "NAME",
        env: "WAKUWAKU_ALGORITHM",
        default: DEFAULT_ALGORITHM,
        help: orList(ALGORITHMS.map((a) => a.name))
      },
      ...[...ALGORITHM_FLAGS].map(([name, { by, flag }]) => ({
        name,
        value: flag.value,
        env: flag.env,
        default: flag.default,
        help: `${by.join(", ")}: ${flag.help}`
      })),
      {
        name: "key",
        value: "STRATEGY",
        env: "WAKUWAKU_KEY",
        default: "ip",
        help: "ip (the client's address), or header:NAME (that header, else the address)"
      },
      {
        name: "trusted-proxies",
        value: "LIST",
        env: "WAKUWAKU_TRUSTED_PROXIES",
        help: "the proxies in front, whose X-Forwarded-For is believed: comma-separated\n" +
          "addresses/CIDRs, or a hop count (default: none, the socket address counts)"
      },
      {
        name: "ipv6-prefix",
        value: "BITS",
        env: "WAKUWAKU_IPV6_PREFIX",
        default: "56",
        help: "IPv6 clients share a limit per network of this prefix"
      },
      {
        name: "namespace",
        value: "NAME",
        env: "WAKUWAKU_NAMESPACE",
        default: "proxy",
        help: "the limiter's name in the store and in RateLimit-Policy"
      },
      {
        name: "mode",
        value: "MODE",
        env: "WAKUWAKU_MODE",
        default: "enforce",
        help: "enforce (over the rate: 429), or delay (over the rate: wait the turn, up to\n" +
          "--max-wait, then forward; as nginx's burst with delay; token-bucket only)"
      },
      {
        name: "max-wait",
        value: "DURATION",
        env: "WAKUWAKU_MAX_WAIT",
        default: "1s",
        help: "delay: the longest a request waits for its turn (further: 429)"
      },
      {
        name: "max-waiting",
        value: "N",
        env: "WAKUWAKU_MAX_WAITING",
        default: "1000",
        help: "delay: the most requests this process holds waiting (past it: 503)"
      }
    ]
  },
  {
    title: "Store",
    flags: [
      {
        name: "redis",
        value: "URL",
        env: "REDIS_URL",
        help: "keep the limits in this Redis (default: embedded, this process only)"
      },
      {
        name: "store-timeout",
        value: "DURATION",
        env: "WAKUWAKU_STORE_TIMEOUT",
        default: "500ms",
        help: "how long a Redis call may take before it counts as a store failure"
      },
      {
        name: "on-store-failure",
        value: "POLICY",
        env: "WAKUWAKU_ON_STORE_FAILURE",
        default: "fallback",
        help: "when Redis fails: fail-closed (503), fail-open (let requests through)\n" +
          "or fallback (limit in this process meanwhile)"
      },
      {
        name: "max-entries",
        value: "N",
        env: "WAKUWAKU_MAX_ENTRIES",
        default: "100000",
        help: "most clients the embedded store and the fallback hold\n(past it, the oldest start afresh)"
      },
      {
        name: "remember-denials",
        value: "N",
        env: "WAKUWAKU_REMEMBER_DENIALS",
        default: "0",
        help: "most clients whose denial is remembered until its Retry-After and answered 429\n" +
          "without asking the store, such as 10000 (0: none; a reset elsewhere is seen only then)"
      }
    ]
  },
  {
    title: "Admin port and access log",
    flags: [
      {
        name: "admin-port",
        value: "PORT",
        env: "WAKUWAKU_ADMIN_PORT",
        help: "serve /metrics (Prometheus), /healthz and /readyz on this port, never --port's\n(default: none)"
      },
      {
        name: "admin-host",
        value: "ADDRESS",
        env: "WAKUWAKU_ADMIN_HOST",
        default: "127.0.0.1",
        help: "address of the admin port (loopback only by default)"
      },
      {
        name: "drain-delay",
        value: "DURATION",
        env: "WAKUWAKU_DRAIN_DELAY",
        default: "0s",
        help: "on SIGINT/SIGTERM, how long /readyz answers 503 while the proxy still serves,\n" +
          "before it stops accepting (the time a load balancer needs to stop sending)"
      },
      {
        name: "access-log",
        value: "FORMAT",
        env: "WAKUWAKU_ACCESS_LOG",
        help: "json: one line per request on stdout (time, method, path without query, status,\n" +
          "route, decision, deniedBy, retryAfter, upstreamMs, totalMs; no header value) (default: off)"
      },
      {
        name: "access-log-query",
        env: "WAKUWAKU_ACCESS_LOG_QUERY",
        help: "write each request's query string in the access log too (it may carry credentials)"
      }
    ]
  },
  {
    title: "Configuration file",
    flags: [
      {
        name: "config",
        value: "FILE",
        env: "WAKUWAKU_CONFIG",
        help: "read routes and settings from this JSON file (docs/http.md); a flag or\n" +
          "its variable wins over the file's field of the same setting; the limit flags\n" +
          "(--algorithm and its flags, --key, --namespace) are refused with it: the\n" +
          "file's routes and default hold the limits"
      },
      {
        name: "check-config",
        value: "FILE",
        env: "",
        help: "check FILE as --config reads it (with the other flags and variables),\n" +
          "print what it holds, and exit: 0 valid, 1 not (as nginx -t)"
      }
    ]
  },
  {
    title: "Other",
    flags: [{ name: "help", env: "", help: "show this help" }]
  }
]

const FLAGS: ReadonlyMap<string, Flag> = new Map(SECTIONS.flatMap((s) => s.flags.map((f) => [f.name, f] as const)))

/** @internal Every flag name, for tests and docs. */
export const flagNames: ReadonlyArray<string> = [...FLAGS.keys()]

/** @internal Every environment variable read. */
export const envNames: ReadonlyArray<string> = [...FLAGS.values()].map((f) => f.env).filter((e) => e !== "")

/** @internal The help of `wakuwaku proxy`. */
export const proxyHelp = (): string => {
  const sections = SECTIONS.map((section) => ({
    title: section.title,
    rows: section.flags.map((flag) => ({
      left: `  ${flag.name === "help" ? "-h, " : ""}--${flag.name}${flag.value === undefined ? "" : ` ${flag.value}`}`,
      help: flag.help,
      more: [flag.default === undefined ? "" : `default ${flag.default}`, flag.env === "" ? "" : `env ${flag.env}`]
        .filter((part) => part !== "").join("; ")
    }))
  }))
  const width = Math.max(...sections.flatMap((s) => s.rows.map((r) => r.left.length))) + 2
  const lines = (row: { readonly left: string; readonly help: string; readonly more: string }) =>
    [...row.help.split("\n"), ...(row.more === "" ? [] : [row.more])].map((text, i) =>
      `${(i === 0 ? row.left : "").padEnd(width)}${text}`
    )
  return [
    "Usage: wakuwaku proxy [flags]",
    "",
    "A reverse proxy that rate-limits each client before forwarding to its upstream (with --config,",
    "per route: each its limits, mode and upstream). Bodies stream both ways; hop-by-hop headers are",
    "dropped; X-Forwarded-For/-Proto/-Host are set. Its own responses (429, and 502/504 when the",
    "upstream fails or times out) carry Proxy-Status: wakuwaku; error=…",
    "",
    "Every flag can also come from its environment variable (env); a flag wins over its variable,",
    "and both win over the --config file's field of the same setting.",
    "DURATION is a number and a unit: 500ms, 30s, 2m, 1h.",
    ...sections.flatMap((s) => ["", `${s.title}:`, ...s.rows.flatMap(lines)]),
    "",
    "Examples:",
    "  wakuwaku proxy --upstream http://127.0.0.1:3000",
    "  wakuwaku proxy --upstream http://app:3000 --trusted-proxies 10.0.0.0/8 --redis redis://redis:6379",
    "  wakuwaku proxy --config proxy.json --redis redis://redis:6379",
    "  wakuwaku proxy --check-config proxy.json",
    ...ALGORITHMS.filter((a) => a.name !== DEFAULT_ALGORITHM).map((a) =>
      `  wakuwaku proxy --demo --algorithm ${a.name} ${a.example}`
    ),
    ""
  ].join("\n")
}

/** @internal The help of `wakuwaku`. */
export const mainHelp = (): string =>
  [
    "Usage: wakuwaku <command> [flags]",
    "",
    "Commands:",
    "  proxy    a rate-limiting reverse proxy (wakuwaku proxy --help)",
    "",
    "  -h, --help    show this help",
    ""
  ].join("\n")

class Invalid extends Error {
  constructor(
    message: string,
    readonly code: 1 | 2 = 2,
    /** Its own lines, with no pointer to the help (a configuration file's problems). */
    readonly plain = false
  ) {
    super(message)
  }
}

/** @internal A duration such as `500ms`, `30s`, `1.5m`, `2 hours`; undefined when it is not one. */
export const parseDuration: (text: string) => Duration.Duration | undefined = parseText

/** A value and where it came from, for messages. */
interface Source {
  readonly value: string
  /** `--port` or `WAKUWAKU_PORT`. */
  readonly from: string
}

const fail = (source: Source, what: string): never => {
  throw new Invalid(`${source.from}: ${what}, got ${JSON.stringify(source.value)}`)
}

const integer = (source: Source, min: number, max: number, what: string): number => {
  const n = /^\d+$/.test(source.value.trim()) ? Number(source.value.trim()) : NaN
  return Number.isSafeInteger(n) && n >= min && n <= max ? n : fail(source, what)
}

const nonNegativeDuration = (source: Source): Duration.Duration => {
  const d = parseDuration(source.value)
  return d !== undefined && Duration.toMillis(d) >= 0 ? d : fail(source, "expected a duration such as 0s, 500ms or 5s")
}

const positiveDuration = (source: Source): Duration.Duration => {
  const d = parseDuration(source.value)
  return d !== undefined && Duration.toMillis(d) > 0
    ? d
    : fail(source, "expected a positive duration such as 500ms, 30s or 2m")
}

/** Insertions, deletions, substitutions and swaps of two neighbours, each one edit (optimal string alignment). */
const editDistance = (a: string, b: string): number => {
  // rows[i][j]: the distance between a's first i characters and b's first j.
  const rows = Array.from({ length: a.length + 1 }, (_, i) => Array.from({ length: b.length + 1 }, (_, j) => i + j))
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const row = rows[i]!
      const substitution = rows[i - 1]![j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1)
      row[j] = Math.min(rows[i - 1]![j]! + 1, row[j - 1]! + 1, substitution)
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) {
        row[j] = Math.min(row[j]!, rows[i - 2]![j - 2]! + 1)
      }
    }
  }
  return rows[a.length]![b.length]!
}

/**
 * The name `word` was probably meant to be: the nearest candidate, case aside, within one edit per three
 * characters typed and two at most, so that a word that is no typo gets no suggestion.
 */
const nearest = (word: string, candidates: Iterable<string>): string | undefined => {
  let best: string | undefined
  let bound = Math.min(2, Math.floor(word.length / 3))
  for (const candidate of candidates) {
    const d = editDistance(word.toLowerCase(), candidate)
    if (d <= bound) [best, bound] = [candidate, d - 1]
  }
  return best
}

/** ` (did you mean …?)` for an unknown command: a command's name, or `proxy` left out before its flag. */
const commandHint = (command: string): string => {
  if (command.startsWith("--") && FLAGS.has(command.slice(2).split("=")[0]!)) {
    return ` (did you mean wakuwaku proxy ${command}?)`
  }
  const near = nearest(command, ["proxy", "help"])
  return near === undefined ? "" : ` (did you mean ${near}?)`
}

/**
 * @internal Reads `wakuwaku <argv>` with `env`: the help, a configuration, or the one-line reason it is
 * invalid with the exit code it calls for (2 for the command line; 1 for a store's URL that cannot be used).
 */
export const parse = (argv: ReadonlyArray<string>, env: Readonly<Record<string, string | undefined>>): Command => {
  const [command, ...rest] = argv
  if (command === undefined) {
    return { _tag: "Invalid", message: "wakuwaku: missing command (see wakuwaku --help)", code: 2 }
  }
  if (command === "-h" || command === "--help" || command === "help") return { _tag: "Help", text: mainHelp() }
  if (command !== "proxy") {
    return {
      _tag: "Invalid",
      message: `wakuwaku: unknown command ${JSON.stringify(command)}${commandHint(command)} (see wakuwaku --help)`,
      code: 2
    }
  }
  try {
    return parseProxy(rest, env)
  } catch (error) {
    if (error instanceof Invalid) {
      // Under --check-config every problem exits 1, as nginx -t does.
      const checking = rest.some((arg) => arg === "--check-config" || arg.startsWith("--check-config="))
      return {
        _tag: "Invalid",
        message: `wakuwaku proxy: ${error.message}${error.plain ? "" : " (see wakuwaku proxy --help)"}`,
        code: checking ? 1 : error.code
      }
    }
    throw error
  }
}

/** The options `parseArgs` reads: every flag, a string unless it is a switch; `-h` is `--help`. */
const PARSE_OPTIONS: ParseArgsConfig["options"] = Object.fromEntries(
  [...FLAGS.values()].map((flag) => [
    flag.name,
    flag.name === "help"
      ? { type: "boolean", short: "h" }
      : { type: flag.value === undefined ? "boolean" : "string" }
  ])
)

/** An unknown flag as typed, and the flag it is nearest to. `-port` reaches here as parseArgs's `-p`. */
const unknownFlag = (quoted: string, args: ReadonlyArray<string>): Invalid => {
  const typed = /^-[^-]$/.test(quoted)
    ? args.find((arg) => arg.startsWith(quoted) && !arg.startsWith("--"))?.split("=")[0] ?? quoted
    : quoted
  const near = nearest(typed.replace(/^-+/, ""), FLAGS.keys())
  return new Invalid(`unknown flag ${typed}${near === undefined ? "" : ` (did you mean --${near}?)`}`)
}

/** `parseArgs`'s error as this command words it (the tests and the docs quote these). */
const invalidArgs = (error: unknown, args: ReadonlyArray<string>): Invalid => {
  const { code, message } = error as { readonly code?: unknown; readonly message: string }
  const quoted = /'(-{1,2}[^'\s=]+)/.exec(message)?.[1] ?? ""
  const flag = FLAGS.get(quoted.replace(/^-+/, ""))
  switch (code) {
    case "ERR_PARSE_ARGS_UNKNOWN_OPTION":
      return unknownFlag(quoted, args)
    case "ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL":
      return new Invalid(`unexpected argument ${JSON.stringify(/'([^']*)'/.exec(message)?.[1] ?? "")}`)
    case "ERR_PARSE_ARGS_INVALID_OPTION_VALUE":
      return flag?.value === undefined
        ? new Invalid(`${quoted} takes no value`)
        : new Invalid(`${quoted} needs a value (${flag.value})`)
    default:
      return new Invalid(message.split("\n")[0] ?? message)
  }
}

/** The algorithm asked for, its flags read (another algorithm's flag, given, is refused). */
const algorithmOf = (
  get: (name: string) => Source | undefined,
  orDefault: (name: string) => Source
): limiterKinds.Configured => {
  const algorithmSource = orDefault("algorithm")
  const name = algorithmSource.value.trim()
  const algorithm = ALGORITHMS.find((a) => a.name === name) ??
    fail(algorithmSource, `expected ${orList(ALGORITHMS.map((a) => a.name))}`)
  for (const [flag, { by }] of ALGORITHM_FLAGS) {
    const source = by.includes(name) ? undefined : get(flag)
    if (source !== undefined) throw new Invalid(`${source.from} applies to ${orList(by)}, not ${name}`)
  }
  const params: Record<string, unknown> = {}
  for (const [flag, definition] of Object.entries<limiterKinds.Flag<unknown>>(algorithm.flags)) {
    const source = orDefault(flag)
    params[flag] = definition.parse(source.value) ?? fail(source, definition.expected)
  }
  return limiterKinds.configure(algorithm, params)
}

const parseProxy = (argv: ReadonlyArray<string>, env: Readonly<Record<string, string | undefined>>): Command => {
  // A value may start with one dash (`--max-entries -1` is a bad number, not a missing value): parseArgs
  // calls that ambiguous, so such a value is attached to its flag first.
  const args: Array<string> = []
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!
    const next = argv[i + 1]
    const takesValue = arg.startsWith("--") && FLAGS.get(arg.slice(2))?.value !== undefined
    if (takesValue && next !== undefined && /^-(?!-)/.test(next)) {
      args.push(`${arg}=${next}`)
      i++
    } else {
      args.push(arg)
    }
  }
  let tokens
  try {
    tokens = parseArgs({ args, options: PARSE_OPTIONS, strict: true, allowPositionals: false, tokens: true }).tokens
  } catch (error) {
    // Asking for help gets it, whatever else is on the line.
    if (argv.includes("-h") || argv.includes("--help")) return { _tag: "Help", text: proxyHelp() }
    throw invalidArgs(error, args)
  }
  const given = new Map<string, Source>()
  for (const token of tokens) {
    if (token.kind === "option-terminator") throw new Invalid(`unexpected argument "--"`)
    if (token.kind !== "option") continue
    if (token.name === "help") return { _tag: "Help", text: proxyHelp() }
    if (given.has(token.name)) throw new Invalid(`--${token.name} is given twice`)
    given.set(token.name, { value: token.value ?? "true", from: `--${token.name}` })
  }

  /** The flag, else its environment variable (ignored when empty). */
  const get = (name: string): Source | undefined => {
    const flag = given.get(name)
    if (flag !== undefined) return flag
    const variable = FLAGS.get(name)?.env ?? ""
    const value = variable === "" ? undefined : env[variable]
    return value === undefined || value.trim() === "" ? undefined : { value, from: variable }
  }
  const orDefault = (name: string): Source => get(name) ?? { value: FLAGS.get(name)?.default ?? "", from: `--${name}` }

  const switchOn = (name: string): boolean => {
    const source = get(name)
    if (source === undefined) return false
    const value = source.value.trim().toLowerCase()
    if (value === "true" || value === "1" || value === "yes") return true
    if (value === "false" || value === "0" || value === "no") return false
    return fail(source, "expected true or false")
  }

  // The configuration file: its fields come after the flags and their variables, before the defaults.
  const checking = given.get("check-config")
  const configSource = get("config")
  if (checking !== undefined && configSource !== undefined) {
    throw new Invalid(`--check-config FILE checks the file --config FILE would read: give one of them`)
  }
  const fileSource = checking ?? configSource
  const file = fileSource === undefined ? undefined : readConfig(fileSource)
  if (file !== undefined) {
    for (const name of LIMIT_FLAGS) {
      const source = get(name)
      if (source !== undefined) {
        throw new Invalid(
          `${source.from}: the limits come from the configuration file's routes and default with ${
            fileSource!.from
          }; ` +
            `${source.from.startsWith("--") ? "drop" : "unset"} ${source.from}`
        )
      }
    }
  }
  /** The flag's value (or its variable's) read by `read`, else the file's field, else the flag's default, read. */
  const setting = <A>(
    name: keyof typeof configFile.OVERLAPPING,
    read: (source: Source) => A,
    fromFile: A | undefined
  ) => {
    const source = get(configFile.OVERLAPPING[name])
    if (source !== undefined) return read(source)
    return fromFile !== undefined ? fromFile : read(orDefault(configFile.OVERLAPPING[name]))
  }
  const fileFields: Partial<configFile.ProxyFile> = file ?? {}

  // Listening
  const hostSource = get("host")
  const host = hostSource === undefined ? fileFields.host?.trim() : hostSource.value.trim()
  if (hostSource !== undefined && (host === "" || /\s|\//.test(host ?? ""))) {
    fail(hostSource, "expected an address or host name")
  }
  const port = setting(
    "port",
    (source) => integer(source, 0, 65_535, "expected a port number from 0 to 65535"),
    fileFields.port
  )
  const shutdownTimeout = setting("shutdownTimeout", positiveDuration, fileFields.shutdownTimeout)

  // Upstream
  const demo = switchOn("demo")
  const upstreamSource = get("upstream")
  if (demo && upstreamSource !== undefined) {
    throw new Invalid(`--demo starts its own upstream: drop ${upstreamSource.from} or --demo`)
  }
  let upstream: Config["upstream"] = { _tag: "Demo" }
  if (upstreamSource !== undefined) {
    try {
      parseUpstream(upstreamSource.value.trim())
    } catch (error) {
      throw new Invalid(`${upstreamSource.from}: ${(error as Error).message}`)
    }
    upstream = { _tag: "Url", url: upstreamSource.value.trim() }
  } else if (!demo && fileFields.upstream !== undefined) {
    upstream = { _tag: "Url", url: fileFields.upstream }
  } else if (!demo) {
    throw new Invalid(
      file === undefined
        ? "--upstream URL is required (or --demo for a built-in demo upstream)"
        : `--upstream URL or the file's "upstream" is required (or --demo for a built-in demo upstream)`
    )
  }
  const timeout = setting("timeout", positiveDuration, fileFields.timeout)

  // Rate limit (the flags' one limit: the default route without a file)
  const limiter = algorithmOf(get, orDefault)

  const keySource = orDefault("key")
  const keyText = keySource.value.trim()
  let key: Config["key"] = { _tag: "ip" }
  if (keyText.startsWith("header:")) {
    const name = keyText.slice("header:".length).trim().toLowerCase()
    if (!/^[!#$%&'*+.^_`|~0-9a-z-]+$/.test(name)) fail(keySource, "expected a header name after header:")
    key = { _tag: "header", name }
  } else if (keyText !== "ip") {
    fail(keySource, "expected ip or header:NAME")
  }

  const trustedProxies = setting("trustedProxies", (trustedSource): ReadonlyArray<string> | number => {
    const text = trustedSource.value.trim()
    if (text === "") return []
    if (/^\d+$/.test(text)) return integer(trustedSource, 0, 1_000, "expected a hop count")
    const entries = text.split(",").map((entry) => entry.trim()).filter((entry) => entry !== "")
    for (const entry of entries) {
      try {
        parseCidr(entry)
      } catch (error) {
        throw new Invalid(`${trustedSource.from}: ${(error as Error).message}`)
      }
    }
    return entries
  }, fileFields.trustedProxies)
  const ipv6Prefix = setting(
    "ipv6Prefix",
    (source) => integer(source, 0, 128, "expected a prefix length from 0 to 128"),
    fileFields.ipv6Prefix
  )
  const namespaceSource = orDefault("namespace")
  const namespace = namespaceSource.value.trim()
  try {
    validateNamespace("the proxy's", namespace)
  } catch {
    fail(namespaceSource, "expected a short word (letters, digits, _ . -)")
  }

  // Store
  const redisSource = get("redis")
  const redis = redisSource === undefined ? fileFields.redis?.trim() : redisSource.value.trim()
  if (redisSource !== undefined) {
    try {
      parseRedisUrl(redis ?? "")
    } catch (error) {
      // A store misconfigured is not a typo in a flag's syntax: exit 1, as a wrong password does at start.
      throw new Invalid(`${redisSource.from}: ${(error as Error).message}`, 1)
    }
  }
  const storeTimeout = setting("storeTimeout", positiveDuration, fileFields.storeTimeout)
  const onStoreFailure = setting(
    "onStoreFailure",
    (source) => failure.fromFlag(source.value) ?? fail(source, failure.FLAG_EXPECTED),
    fileFields.onStoreFailure
  )
  const maxEntries = setting(
    "maxEntries",
    (source) => integer(source, 1, Number.MAX_SAFE_INTEGER, "expected a positive whole number"),
    fileFields.maxEntries
  )
  const rememberDenials = setting(
    "rememberDenials",
    (source) => integer(source, 0, Number.MAX_SAFE_INTEGER, "expected a whole number"),
    fileFields.rememberDenials
  )

  // Admin port and access log
  const admin = adminOf(get, orDefault, port)
  const accessLog = accessLogOf(get, switchOn)
  // Delay (the default route's mode without a file; the file's routes have their own)
  const modeSource = orDefault("mode")
  const mode = modeSource.value.trim()
  if (mode !== "enforce" && mode !== "delay") fail(modeSource, "expected enforce or delay")
  if (mode === "delay" && !canReserve(limiter.make(namespace))) {
    throw new Invalid(
      `${modeSource.from} delay: a request waits its turn in a reservation, which the ${limiter.algorithm} algorithm ` +
        `cannot make; use --algorithm ${orList(configFile.RESERVING)}, or --mode enforce`
    )
  }
  const maxWaitSource = get("max-wait")
  if (mode !== "delay" && maxWaitSource !== undefined) {
    throw new Invalid(`${maxWaitSource.from} applies to --mode delay only`)
  }
  const maxWait = mode === "delay" ? positiveDuration(orDefault("max-wait")) : undefined
  const workers = setting("workers", (source): number => {
    if (source.value.trim() === "auto") return availableParallelism()
    return integer(source, 1, 1_024, "expected a number of processes from 1 to 1024, or auto")
  }, fileFields.workers === "auto" ? availableParallelism() : fileFields.workers)
  if (workers > 1 && redis === undefined) {
    const source = get("workers")
    const said = source === undefined ? `the file's "workers": ${String(fileFields.workers)}` : source.from
    throw new Invalid(
      `${said} (${workers} processes) with the embedded store: each worker would keep limits of its own, so a ` +
        `client would get ${workers} times its limit; give --redis URL (or REDIS_URL) so that the workers share ` +
        "their limits, or run one worker (--workers 1)"
    )
  }
  const maxWaiting = setting(
    "maxWaiting",
    (source) => integer(source, 1, Number.MAX_SAFE_INTEGER, "expected a positive whole number"),
    fileFields.maxWaiting
  )

  const config: Config = {
    host,
    port,
    upstream,
    timeout,
    shutdownTimeout,
    limiter,
    key,
    trustedProxies,
    ipv6Prefix,
    namespace,
    redis,
    storeTimeout,
    onStoreFailure,
    maxEntries,
    rememberDenials,
    maxWaiting,
    workers,
    configFile: fileSource?.value,
    routes: file === undefined ? [] : configFile.routesOf(file),
    defaultRoute: file === undefined ? flagsRoute(limiter, key, namespace, maxWait) : configFile.defaultRouteOf(file),
    admin,
    accessLog
  }
  if (checking !== undefined) return { _tag: "Check", text: checked(checking.value, config), config }
  return { _tag: "Proxy", config }
}

/** The flags that make the one limit of the proxy without a file: refused beside a file, which holds the limits. */
const LIMIT_FLAGS: ReadonlyArray<string> = [
  "algorithm",
  ...ALGORITHM_FLAGS.keys(),
  "key",
  "namespace",
  "mode",
  "max-wait"
]

/** The default route the flags make without a file: their one limit, keyed by the address or a header. */
const flagsRoute = (
  limiter: limiterKinds.Configured,
  key: Config["key"],
  namespace: string,
  maxWait: Duration.Duration | undefined
): configFile.Route => ({
  name: "default",
  match: undefined,
  limits: [{
    name: namespace,
    algorithm: limiter,
    key: key._tag === "ip" ? [{ _tag: "ip" }] : [{ _tag: "header", name: key.name }],
    cost: 1
  }],
  shadow: [],
  // --mode delay, with its --max-wait; else enforce.
  mode: maxWait === undefined ? "enforce" : "delay",
  maxWait,
  upstream: undefined,
  timeout: undefined
})

/** A configuration file, read and decoded; its problems, one line each, as an `Invalid`. */
const readConfig = (source: Source): configFile.ProxyFile => {
  const path = source.value.trim()
  let text: string
  try {
    text = readFileSync(path, "utf8")
  } catch (error) {
    throw new Invalid(`${source.from}: cannot read ${JSON.stringify(path)}: ${(error as Error).message}`)
  }
  const decoded = configFile.decode(text)
  if (Either.isRight(decoded)) return decoded.right
  const problems = decoded.left
  throw new Invalid(
    `${path}: ${problems.length === 1 ? "1 problem" : `${problems.length} problems`}\n${
      problems.map((problem) => `  ${problem}`).join("\n")
    }`,
    2,
    true
  )
}

/** What `--check-config` prints of a valid file: its routes, in order, and the default route. */
const checked = (path: string, config: Config): string => {
  const lines = [...config.routes, config.defaultRoute].map((route) => `  ${configFile.describeRoute(route)}`)
  return [
    `wakuwaku proxy: ${path}: the configuration is valid: ${config.routes.length} ${
      config.routes.length === 1 ? "route" : "routes"
    } and the default route`,
    ...lines,
    ""
  ].join("\n")
}

/** An address or host name to listen on (no blank, no slash), else an `Invalid`. */
const listenHost = (source: Source): string => {
  const host = source.value.trim()
  return host === "" || /\s|\//.test(host) ? fail(source, "expected an address or host name") : host
}

/** The admin port, if asked for: never the public `port`; its other flags refused without it. */
const adminOf = (
  get: (name: string) => Source | undefined,
  orDefault: (name: string) => Source,
  port: number
): Config["admin"] => {
  const portSource = get("admin-port")
  if (portSource === undefined) {
    for (const name of ["admin-host", "drain-delay"]) {
      const source = get(name)
      if (source !== undefined) throw new Invalid(`${source.from} applies only with --admin-port`)
    }
    return undefined
  }
  const adminPort = integer(portSource, 0, 65_535, "expected a port number from 0 to 65535")
  if (adminPort !== 0 && adminPort === port) {
    fail(portSource, "expected a port other than --port's (metrics and health are never served to clients)")
  }
  return {
    port: adminPort,
    host: listenHost(orDefault("admin-host")),
    drainDelay: nonNegativeDuration(orDefault("drain-delay"))
  }
}

/** The access log, if asked for; `--access-log-query` refused without it. */
const accessLogOf = (
  get: (name: string) => Source | undefined,
  switchOn: (name: string) => boolean
): Config["accessLog"] => {
  const source = get("access-log")
  const query = switchOn("access-log-query")
  if (source === undefined) {
    if (query) throw new Invalid(`${get("access-log-query")!.from} applies only with --access-log json`)
    return undefined
  }
  if (source.value.trim() !== "json") fail(source, "expected json")
  return { query }
}
