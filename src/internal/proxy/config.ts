/**
 * @internal The configuration file of `wakuwaku proxy --config FILE`: its Effect Schema ({@link ProxyFile}), the
 * path-named errors of a file that does not decode ({@link decode}), the routes it describes once decoded
 * ({@link Route}), and the JSON Schema made from the same Schema ({@link jsonSchema}, committed as
 * docs/proxy-config.schema.json for editors). Free of @effect/platform, as the command line is.
 *
 * The file is JSON. Its fields are the flags' settings under camelCase names (`port`, `upstream`,
 * `storeTimeout`, …), `routes` (tried in order, the first that matches a request takes it) and `default` (the
 * route of the requests no route matches). Every value is read by the parser its flag uses, so one value means
 * one thing in a flag and in the file: durations (`30s`), a limit's algorithm and its parameters (from the
 * limiter kinds' table, ../limiter.ts), addresses and CIDRs, URLs.
 */
import * as Duration from "effect/Duration"
import * as Either from "effect/Either"
import * as JSONSchema from "effect/JSONSchema"
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import * as Wakuwaku from "../../index.js"
import { parseText } from "../duration.js"
import { parseCidr } from "../http/address.js"
import { canReserve } from "../http/decision.js"
import * as failure from "../http/failure.js"
import { validateNamespace } from "../key.js"
import * as limiterKinds from "../limiter.js"
import { parseRedisUrl } from "../url.js"
import { MAX_WAIT } from "./delay.js"
import * as routes from "./routes.js"
import { parseUpstream } from "./target.js"

/** @internal How a limit keys a request: one part or several (each part's value, joined). */
export type KeyPart = { readonly _tag: "ip" } | { readonly _tag: "header"; readonly name: string }

/** @internal A limit of a route, decoded: its name, its algorithm with its parameters, its key and its cost. */
export interface RouteLimit {
  /** Its name: the limiter's namespace in the store, and its policy's name in `RateLimit-Policy`. */
  readonly name: string
  readonly algorithm: limiterKinds.Configured
  /** One part or more; several are one key made of every part's value. */
  readonly key: ReadonlyArray<KeyPart>
  readonly cost: number
}

/** @internal A route's mode (see `Proxy.RouteMode`). */
export type Mode = "enforce" | "shadow" | "delay"

/** @internal A route, decoded from the file (or made of the flags: the default route, `default`). */
export interface Route {
  readonly name: string
  /** What it matches; none for the default route. */
  readonly match: routes.Match | undefined
  readonly limits: ReadonlyArray<RouteLimit>
  /** Shadow limits: decided in the same store call as `limits`, never denying. */
  readonly shadow: ReadonlyArray<RouteLimit>
  readonly mode: Mode
  /** Under `delay`, the longest a request waits its turn. */
  readonly maxWait: Duration.Duration | undefined
  readonly upstream: string | undefined
  readonly timeout: Duration.Duration | undefined
}

// ---------------------------------------------------------------------------------------------------------------
// Values, each read by the parser its flag uses

/**
 * What a refinement of ours adds to the JSON Schema: nothing but its annotations (its description), which a
 * filter without a `jsonSchema` annotation would lose.
 */
const KEEP = { jsonSchema: {} }

/** A value as a message quotes it. */
const shown = (value: unknown): string => {
  try {
    return JSON.stringify(value) ?? String(value)
  } catch {
    return String(value)
  }
}

/** `expected <what>, got <value>`, for every failure of `schema` (its inner ones included). */
const expecting = <S extends Schema.Schema.Any>(schema: S, what: string, description = what): S =>
  schema.annotations({
    description,
    message: (issue) => ({ message: `expected ${what}, got ${shown(issue.actual)}`, override: true })
  }) as S

/** `expected <what>, got <value>` when the value is not of `schema`'s shape (a message of its own otherwise). */
const shaped = <S extends Schema.Schema.Any>(schema: S, what: string, description?: string): S =>
  schema.annotations({
    ...(description === undefined ? {} : { description }),
    message: (issue) => ({ message: `expected ${what}, got ${shown(issue.actual)}`, override: false })
  }) as S

/** A string decoded by `parse` (a value, or the text of what was expected). */
const parsed = <A>(
  parse: (text: string) => A | string,
  target: Schema.Schema<A>,
  description: string
) =>
  Schema.transformOrFail(expecting(Schema.String, "a string", description), target, {
    strict: true,
    decode: (text, _, ast) => {
      const value = parse(text)
      return typeof value === "string"
        ? ParseResult.fail(new ParseResult.Type(ast, text, `${value}, got ${shown(text)}`))
        : ParseResult.succeed(value)
    },
    encode: (_, __, ast) => ParseResult.fail(new ParseResult.Forbidden(ast, _, "the configuration is decoded only"))
  }).annotations({ description })

/** A whole number from `min` to `max`. */
const whole = (min: number, max: number, what: string, description: string) =>
  expecting(Schema.Number.pipe(Schema.int(), Schema.between(min, max)), what, description).annotations({
    title: what
  })

const DURATION_EXPECTED = "expected a positive duration such as 500ms, 30s or 2m"

const duration = (description: string) =>
  parsed(
    (text) => {
      const d = parseText(text)
      return d !== undefined && Duration.toMillis(d) > 0 ? d : DURATION_EXPECTED
    },
    Schema.DurationFromSelf,
    `${description}: a number and a unit (500ms, 30s, 2m, 1h)`
  )

/** A word: 1 to 64 letters, digits, `_`, `.` or `-` (a namespace, a route's name). */
const WORD = "a name of 1 to 64 letters, digits, '_', '.' or '-'"

const word = (description: string) =>
  expecting(
    Schema.String.pipe(Schema.filter((text) => {
      try {
        validateNamespace("a", text)
        return true
      } catch {
        return false
      }
    }, KEEP)),
    WORD,
    description
  )

/** What a thrown parser said, as a message's "expected …" part. */
const said = (error: unknown): string => (error instanceof Error ? error.message : String(error))

/** A string checked by `problem` (what was expected, or undefined when it is fine). */
const checkedBy = (problem: (text: string) => string | undefined, description: string) =>
  expecting(Schema.String, "a string", description).pipe(
    Schema.filter((text) => {
      const found = problem(text)
      return found === undefined ? true : `${found}, got ${shown(text)}`
    }, KEEP)
  ).annotations({ description })

/** A string checked by a parser that throws a message that ends with what it got. */
const checked = (check: (text: string) => unknown, description: string) =>
  expecting(Schema.String, "a string", description).pipe(
    Schema.filter((text) => {
      try {
        check(text)
        return true
      } catch (error) {
        return said(error)
      }
    }, KEEP)
  ).annotations({ description })

const upstreamUrl = (description: string) =>
  checked((text) => parseUpstream(text), `${description}: an absolute http:// or https:// URL without query`)

// ---------------------------------------------------------------------------------------------------------------
// Keys and limits

const KEY_EXPECTED = "ip, header:NAME, or a list of them (one key made of each one's value)"

const keyPart = (text: string): KeyPart | undefined => {
  if (text === "ip") return { _tag: "ip" }
  if (!text.startsWith("header:")) return undefined
  const name = text.slice("header:".length).toLowerCase()
  return /^[!#$%&'*+.^_`|~0-9a-z-]+$/.test(name) ? { _tag: "header", name } : undefined
}

/** `ip`, `header:NAME`, or a non-empty list of distinct ones. */
const Key = Schema.transformOrFail(
  Schema.Union(Schema.String, Schema.NonEmptyArray(Schema.String)),
  Schema.Array(Schema.Any as Schema.Schema<KeyPart>),
  {
    strict: true,
    decode: (value, _, ast) => {
      const texts = typeof value === "string" ? [value] : value
      const parts = texts.map(keyPart)
      const bad = (message: string) => ParseResult.fail(new ParseResult.Type(ast, value, message))
      if (parts.some((p) => p === undefined)) return bad(`expected ${KEY_EXPECTED}, got ${shown(value)}`)
      if (new Set(texts.map((t) => t.toLowerCase())).size < texts.length) {
        return bad(`expected each part once, got ${shown(value)}`)
      }
      return ParseResult.succeed(parts as ReadonlyArray<KeyPart>)
    },
    encode: (_, __, ast) => ParseResult.fail(new ParseResult.Forbidden(ast, _, "the configuration is decoded only"))
  }
).annotations({
  identifier: "Key",
  description: "how requests are keyed for this limit: ip (the client's address, default), header:NAME (that " +
    "header's value, the client's address without it), or a list of them (one key made of every one's value)",
  message: (issue) => ({
    message: issue._tag === "Type" && issue.message !== undefined
      ? issue.message
      : `expected ${KEY_EXPECTED}, got ${shown(issue.actual)}`,
    override: true
  })
})

/** A parameter of an algorithm: its flag's value, read by its flag's parser (a JSON number for a count). */
const parameter = (name: string, flag: limiterKinds.Flag<unknown>) => {
  const description = `${flag.help} (the flag --${name})`
  const from = flag.json === "integer"
    ? expecting(Schema.Int, flag.expected.replace(/^expected /, ""), description)
    : expecting(Schema.String, flag.expected.replace(/^expected /, ""), description)
  return Schema.transformOrFail(from as Schema.Schema<string | number>, Schema.Unknown, {
    strict: true,
    decode: (value, _, ast) => {
      const decoded = flag.parse(String(value))
      return decoded === undefined
        ? ParseResult.fail(new ParseResult.Type(ast, value, `${flag.expected}, got ${shown(value)}`))
        : ParseResult.succeed(decoded)
    },
    encode: (_, __, ast) => ParseResult.fail(new ParseResult.Forbidden(ast, _, "the configuration is decoded only"))
  }).annotations({ description })
}

/** A required field, whose absence says what was expected. */
const required = <S extends Schema.Schema.All>(schema: S, what: string) =>
  Schema.propertySignature(schema).annotations({ missingMessage: () => `is missing: expected ${what}` })

const optional = <S extends Schema.Schema.All>(schema: S) => Schema.optionalWith(schema, { exact: true })

/** The default algorithm's name comes first in every list. */
const ALGORITHMS = limiterKinds.algorithmsOf(Wakuwaku, "token-bucket")

/** `a`, `a or b`, `a, b or c`. */
const orList = (words: ReadonlyArray<string>): string =>
  words.length < 2 ? words.join("") : `${words.slice(0, -1).join(", ")} or ${words[words.length - 1]}`

const COST = whole(1, Number.MAX_SAFE_INTEGER, "a positive whole number", "what a request costs this limit (default 1)")

/** A limit of one algorithm: its name, the algorithm, its parameters, its key and cost; its kind's checks run. */
const limitOf = (algorithm: (typeof ALGORITHMS)[number]) =>
  Schema.Struct({
    name: required(word("the limit's name: its limiter's name in the store and in RateLimit-Policy"), WORD),
    algorithm: required(Schema.Literal(algorithm.name), orList(ALGORITHMS.map((a) => a.name))),
    ...Object.fromEntries(
      Object.entries<limiterKinds.Flag<unknown>>(algorithm.flags).map(([name, flag]) => [
        name,
        required(parameter(name, flag), flag.expected.replace(/^expected /, ""))
      ])
    ),
    key: optional(Key),
    cost: optional(COST)
  }).annotations({ description: `a ${algorithm.title} limit` }).pipe(
    Schema.filter((limit) => {
      try {
        configureLimit(limit as unknown as EncodedLimit).algorithm.make(limit.name)
        return true
      } catch (error) {
        return said(error).replace(/^wakuwaku(?:\/\w+)?: /, "")
      }
    }, KEEP)
  )

/** A limit as the Schema decodes it: the algorithm's name and its parameters (each read by its parser). */
interface EncodedLimit {
  readonly name: string
  readonly algorithm: string
  readonly key?: ReadonlyArray<KeyPart>
  readonly cost?: number
  readonly [parameter: string]: unknown
}

const configureLimit = (limit: EncodedLimit): RouteLimit => {
  const algorithm = ALGORITHMS.find((a) => a.name === limit.algorithm)!
  const params = Object.fromEntries(Object.keys(algorithm.flags).map((flag) => [flag, limit[flag]]))
  return {
    name: limit.name,
    algorithm: limiterKinds.configure(algorithm, params),
    key: limit.key ?? [{ _tag: "ip" }],
    cost: limit.cost ?? 1
  }
}

const LIMIT_EXPECTED = `a limit: an object with a name, an algorithm (${
  orList(ALGORITHMS.map((a) => a.name))
}) and its parameters`

const Limit = shaped(Schema.Union(...ALGORITHMS.map(limitOf)), LIMIT_EXPECTED, LIMIT_EXPECTED).annotations({
  identifier: "Limit"
})

const Limits = (description: string) => shaped(Schema.Array(Limit), "a list of limits", description)

// ---------------------------------------------------------------------------------------------------------------
// Routes

const Methods = shaped(Schema.Array(checkedBy(routes.methodProblem, "a method such as GET")), "a list of methods")
  .pipe(
    Schema.filter((methods) => methods.length > 0 || "expected a non-empty list of methods such as [\"POST\"]", KEEP)
  )
  .annotations({ description: "the methods it takes (a list with GET takes HEAD too); default any" })

const pattern = (description: string) => checkedBy(routes.patternProblem, description)

const Match = shaped(
  Schema.Struct({
    methods: optional(Methods),
    host: optional(
      checkedBy(
        routes.hostProblem,
        "the Host without its port, case aside: a name, or *.name for every name below it; default any"
      )
    ),
    path: optional(
      pattern("this path exactly (decoded, lowercase, no trailing slash); a segment * matches any one segment")
    ),
    prefix: optional(
      pattern("this path and every path below it, segment by segment; a segment * matches any one segment")
    )
  }),
  "an object with methods, host, path or prefix"
).pipe(
  Schema.filter((match) => {
    if (match.path !== undefined && match.prefix !== undefined) return "give path or prefix, not both"
    if (Object.keys(match).length === 0) return "expected at least one of methods, host, path or prefix, got {}"
    return true
  }, KEEP)
).annotations({ identifier: "Match", description: "what the route matches: every field given must match" })

const MODE = expecting(
  Schema.Literal("enforce", "shadow", "delay"),
  "enforce, shadow or delay",
  "enforce (deny over the limits, default), shadow (decide and count, deny nothing) or delay (wait up to maxWait)"
)

/** What a route and the default route share: limits, shadow limits, the mode and its wait. */
const routeFields = {
  limits: optional(Limits("its limits, decided as one: a request any of them denies spends from none")),
  shadow: optional(Limits("shadow limits: decided in the same store call as the limits, never denying")),
  mode: optional(MODE),
  maxWait: optional(duration("under delay, the longest a request waits its turn"))
}

const RouteSchema = shaped(
  Schema.Struct({
    name: required(word("the route's name, in logs and metrics"), WORD),
    match: required(Match, "an object with methods, host, path or prefix"),
    ...routeFields,
    upstream: optional(upstreamUrl("its own upstream (default the proxy's)")),
    timeout: optional(duration("its upstream's timeout (default the proxy's)"))
  }),
  "a route: an object with a name and a match",
  "a route: the requests it matches and how it limits them"
).annotations({ identifier: "Route" })

const DefaultRoute = shaped(
  Schema.Struct(routeFields),
  "an object (the default route: limits, shadow, mode, maxWait)",
  "the route of the requests no route matches; without it, they pass with no limit"
).annotations({ identifier: "DefaultRoute" })

// ---------------------------------------------------------------------------------------------------------------
// The file

const TRUSTED_EXPECTED = "a list of addresses and CIDR blocks, or a hop count from 0 to 1000"

const TrustedProxies = Schema.transformOrFail(
  expecting(Schema.Union(Schema.Array(Schema.String), Schema.Number), TRUSTED_EXPECTED),
  Schema.Union(Schema.Array(Schema.String), Schema.Number),
  {
    strict: true,
    decode: (value, _, ast) => {
      const bad = (message: string) => ParseResult.fail(new ParseResult.Type(ast, value, message))
      if (typeof value === "number") {
        return Number.isSafeInteger(value) && value >= 0 && value <= 1_000
          ? ParseResult.succeed(value)
          : bad(`expected ${TRUSTED_EXPECTED}, got ${value}`)
      }
      for (const entry of value) {
        try {
          parseCidr(entry)
        } catch (error) {
          return bad(said(error))
        }
      }
      return ParseResult.succeed(value)
    },
    encode: ParseResult.succeed
  }
).annotations({
  description: "the proxies in front, whose X-Forwarded-For is believed: addresses and CIDR blocks, or a hop count"
})

/** @internal The file's fields that a flag also sets: the flag (or its variable) wins. */
export const OVERLAPPING = {
  host: "host",
  port: "port",
  shutdownTimeout: "shutdown-timeout",
  upstream: "upstream",
  timeout: "timeout",
  trustedProxies: "trusted-proxies",
  ipv6Prefix: "ipv6-prefix",
  redis: "redis",
  storeTimeout: "store-timeout",
  onStoreFailure: "on-store-failure",
  maxEntries: "max-entries",
  rememberDenials: "remember-denials",
  maxWaiting: "max-waiting",
  workers: "workers"
} as const

const FileStruct = shaped(
  Schema.Struct({
    $schema: optional(Schema.String.annotations({ description: "this file's JSON Schema, for editors" })),
    host: optional(
      expecting(
        Schema.String.pipe(Schema.filter((h) => h.trim() !== "" && !/\s|\//.test(h), KEEP)),
        "an address or host name",
        "address to listen on (default every interface)"
      )
    ),
    port: optional(whole(0, 65_535, "a port number from 0 to 65535", "port to listen on; 0 picks a free one")),
    shutdownTimeout: optional(duration("on SIGINT/SIGTERM, how long in-flight requests may finish")),
    upstream: optional(upstreamUrl("the service to forward to")),
    timeout: optional(duration("how long the upstream has to start its response (then 504)")),
    trustedProxies: optional(TrustedProxies),
    ipv6Prefix: optional(whole(0, 128, "a prefix length from 0 to 128", "IPv6 clients share a limit per network")),
    redis: optional(checked((text) => parseRedisUrl(text), "keep the limits in this Redis (redis:// or rediss://)")),
    storeTimeout: optional(duration("how long a Redis call may take before it counts as a store failure")),
    onStoreFailure: optional(
      expecting(
        Schema.Literal(...failure.MODES),
        orList(failure.MODES),
        "when Redis fails: fail-closed (503), fail-open (let requests through) or fallback (limit in this process)"
      )
    ),
    maxEntries: optional(
      whole(1, Number.MAX_SAFE_INTEGER, "a positive whole number", "most clients the embedded store and fallback hold")
    ),
    rememberDenials: optional(
      whole(0, Number.MAX_SAFE_INTEGER, "a whole number", "most clients whose denial is remembered (0: none)")
    ),
    workers: optional(
      expecting(
        Schema.Union(Schema.Literal("auto"), Schema.Number.pipe(Schema.int(), Schema.between(1, 1_024))),
        "a number of processes from 1 to 1024, or \"auto\"",
        "processes serving the port (one per core: auto); more than 1 needs redis"
      )
    ),
    maxWaiting: optional(
      whole(1, Number.MAX_SAFE_INTEGER, "a positive whole number", "delay: the most requests held waiting (then 503)")
    ),
    routes: optional(shaped(Schema.Array(RouteSchema), "a list of routes", "routes, in order: the first that matches")),
    default: optional(DefaultRoute)
  }),
  "an object"
)

type FileFields = typeof FileStruct.Type

/** What a route and the default route share, decoded. */
type RouteFields = NonNullable<FileFields["default"]>

/** A problem at `path` (under the file's root). */
interface Problem {
  readonly path: ReadonlyArray<string | number>
  readonly message: string
}

/** @internal The algorithms whose limiters reserve turns (made with their flags' defaults): those delay takes. */
export const RESERVING = ALGORITHMS.filter((algorithm) => {
  const params = Object.fromEntries(
    Object.entries<limiterKinds.Flag<unknown>>(algorithm.flags).map(([name, flag]) => [name, flag.parse(flag.default)])
  )
  return canReserve(algorithm.make("proxy", params))
}).map((algorithm) => algorithm.name)

/**
 * A route in delay mode waits each request's turn in one reservation (../proxy/delay.ts): one limit, of an
 * algorithm that reserves, and no shadow limits (a reservation is one bucket's store call).
 */
const delayChecks = (route: RouteFields, path: ReadonlyArray<string | number>, problems: Array<Problem>): void => {
  const listed = (route.limits ?? []) as unknown as ReadonlyArray<EncodedLimit>
  const first = listed[0]
  if (listed.length !== 1 || first === undefined) {
    problems.push({
      path: [...path, "limits"],
      message: `delay waits each request's turn in one limit: expected one limit, got ${listed.length}`
    })
  } else if (!canReserve(configureLimit(first).algorithm.make(first.name))) {
    problems.push({
      path: [...path, "limits", 0, "algorithm"],
      message: `delay waits each request's turn in a reservation, which ${shown(first.algorithm)} cannot make: ` +
        `expected ${orList(RESERVING)}`
    })
  }
  if ((route.shadow ?? []).length > 0) {
    problems.push({ path: [...path, "shadow"], message: "delay takes no shadow limits (a reservation is one limit's)" })
  }
}

/** The checks across fields: names, a limit defined once, delay's wait, routes that can be reached. */
const crossChecks = (file: FileFields): ReadonlyArray<Problem> => {
  const problems: Array<Problem> = []
  const routeNames = new Map<string, number>()
  const limits = new Map<string, { readonly at: string; readonly definition: string }>()
  const checkRoute = (route: RouteFields, path: ReadonlyArray<string | number>) => {
    const mode = route.mode ?? "enforce"
    if (mode === "delay" && route.maxWait === undefined) {
      problems.push({ path: [...path, "mode"], message: "delay needs maxWait: the longest a request waits its turn" })
    }
    if (mode !== "delay" && route.maxWait !== undefined) {
      problems.push({ path: [...path, "maxWait"], message: `applies to mode delay only, not ${mode}` })
    } else if (route.maxWait !== undefined && Duration.greaterThan(route.maxWait, MAX_WAIT)) {
      problems.push({
        path: [...path, "maxWait"],
        message: `expected at most ${Duration.format(MAX_WAIT)} (the longest a timer waits), got ${
          Duration.format(route.maxWait)
        }`
      })
    }
    if (mode === "delay") delayChecks(route, path, problems)
    const inRoute = new Map<string, string>()
    for (const list of ["limits", "shadow"] as const) {
      ;(route[list] ?? []).forEach((listed, j) => {
        const limit = listed as unknown as EncodedLimit
        const at = [...path, list, j]
        const own = `${limit.algorithm} ${limit.name}`
        const twice = inRoute.get(own)
        if (twice !== undefined) {
          problems.push({
            path: [...at, "name"],
            message: `${shown(limit.name)} is listed twice in this route (at ${twice})`
          })
        }
        inRoute.set(own, formatPath(at))
        // Its algorithm and parameters (as decoded), not its key or cost, which each route sets its own way.
        const definition = JSON.stringify(
          Object.keys(limit).filter((k) => k !== "key" && k !== "cost").sort().map((k) => [k, limit[k]])
        )
        const known = limits.get(own)
        if (known === undefined) limits.set(own, { at: formatPath(at), definition })
        else if (known.definition !== definition) {
          problems.push({
            path: [...at, "name"],
            message: `${shown(limit.name)} is defined differently at ${known.at}: one name, one limit (they share ` +
              "its keys in the store)"
          })
        }
      })
    }
  }
  ;(file.routes ?? []).forEach((route, i) => {
    const seen = routeNames.get(route.name)
    if (route.name === "default") {
      problems.push({ path: ["routes", i, "name"], message: "\"default\" is the default route's name: choose another" })
    } else if (seen !== undefined) {
      problems.push({
        path: ["routes", i, "name"],
        message: `${shown(route.name)} is given twice (and at routes[${seen}])`
      })
    }
    routeNames.set(route.name, i)
    checkRoute(route, ["routes", i])
  })
  if (file.default !== undefined) checkRoute(file.default, ["default"])
  return problems
}

const FileSchema = FileStruct.pipe(
  Schema.filter((file) => {
    const problems = crossChecks(file)
    return problems.length === 0 ? true : problems.map((p) => ({ path: p.path, message: p.message }))
  }, KEEP)
).annotations({
  title: "wakuwaku proxy configuration",
  description: "The configuration file of wakuwaku proxy --config FILE (docs/http.md, \"Routes and the " +
    "configuration file\"). A flag or its environment variable wins over the field of the same setting."
})

/** @internal The file's Schema: decodes a parsed JSON value into {@link ProxyFile}. */
export const ProxyFile = FileSchema

/** @internal A decoded file. */
export type ProxyFile = typeof FileSchema.Type

// ---------------------------------------------------------------------------------------------------------------
// Errors

/** @internal A path as the errors write it: `routes[2].limits[0].refill`. */
export const formatPath = (path: ReadonlyArray<PropertyKey>): string =>
  path.reduce<string>(
    (text, part) =>
      typeof part === "number" ? `${text}[${part}]` : text === "" ? String(part) : `${text}.${String(part)}`,
    ""
  )

/** Insertions, deletions and substitutions, each one edit. */
const distance = (a: string, b: string): number => {
  let row = Array.from({ length: b.length + 1 }, (_, j) => j)
  for (let i = 1; i <= a.length; i++) {
    const next = [i]
    for (let j = 1; j <= b.length; j++) {
      next[j] = Math.min(row[j]! + 1, next[j - 1]! + 1, row[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1))
    }
    row = next
  }
  return row[b.length]!
}

/** One problem as the errors say it: `<path>: <what was expected>`. */
const sayProblem = (issue: ParseResult.ArrayFormatterIssue): string => {
  const path = issue.path.length === 0 ? "the configuration" : formatPath(issue.path)
  if (issue._tag === "Unexpected") {
    const fields = [...issue.message.matchAll(/"([^"]+)"/g)].map((m) => m[1]!)
    const field = String(issue.path[issue.path.length - 1])
    const near = fields.find((f) => distance(field.toLowerCase(), f.toLowerCase()) <= 2)
    return `${path}: unknown field${near === undefined ? "" : ` (did you mean ${near}?)`}; expected ${orList(fields)}`
  }
  // Effect's own words for a literal that is not one of its values: `Expected "a" | "b", actual "c"`.
  const literals = /^Expected ((?:"[^"]*"(?: \| )?)+), actual (.*)$/s.exec(issue.message)
  if (literals !== null) {
    const values = [...literals[1]!.matchAll(/"([^"]*)"/g)].map((m) => m[1]!)
    return `${path}: expected ${orList(values)}, got ${literals[2]}`
  }
  return `${path}: ${issue.message}`
}

/** @internal Decodes a file's text: the decoded file, or every problem, one line each, path first. */
export const decode = (text: string): Either.Either<ProxyFile, ReadonlyArray<string>> => {
  let json: unknown
  try {
    json = JSON.parse(text)
  } catch (error) {
    return Either.left([`not JSON: ${said(error)}`])
  }
  return Either.mapLeft(
    Schema.decodeUnknownEither(FileSchema, { errors: "all", onExcessProperty: "error" })(json),
    (error) => [...new Set(ParseResult.ArrayFormatter.formatErrorSync(error).map(sayProblem))]
  )
}

/** A decoded route's limits as {@link RouteLimit}s. */
const limitsOf = (limits: ReadonlyArray<unknown> | undefined): ReadonlyArray<RouteLimit> =>
  (limits ?? []).map((limit) => configureLimit(limit as EncodedLimit))

/** @internal The routes of a decoded file, in order (the default route apart: {@link defaultRouteOf}). */
export const routesOf = (file: ProxyFile): ReadonlyArray<Route> =>
  (file.routes ?? []).map((route) => ({
    name: route.name,
    match: route.match,
    limits: limitsOf(route.limits),
    shadow: limitsOf(route.shadow),
    mode: route.mode ?? "enforce",
    maxWait: route.maxWait,
    upstream: route.upstream,
    timeout: route.timeout
  }))

/** @internal The default route of a decoded file: its `default`, or a route with no limits. */
export const defaultRouteOf = (file: ProxyFile): Route => ({
  name: "default",
  match: undefined,
  limits: limitsOf(file.default?.limits),
  shadow: limitsOf(file.default?.shadow),
  mode: file.default?.mode ?? "enforce",
  maxWait: file.default?.maxWait,
  upstream: undefined,
  timeout: undefined
})

/** @internal The JSON Schema of the file, made from {@link ProxyFile} (docs/proxy-config.schema.json). */
export const jsonSchema = (): object => JSONSchema.make(FileSchema)

/** @internal A key in words: `per client IP`, `per x-api-key header (client IP without it)`, or both. */
export const describeKey = (key: ReadonlyArray<KeyPart>): string => {
  const parts = key.map((part) => part._tag === "ip" ? "client IP" : `${part.name} header`)
  const headerOnly = key.length === 1 && key[0]!._tag === "header"
  return `per ${parts.join(" and ")}${headerOnly ? " (client IP without it)" : ""}`
}

/** A limit in words: `fixed window "login": 5 per 1m, per client IP`. */
const describeLimit = (limit: RouteLimit): string =>
  `${limit.algorithm.title} "${limit.name}": ${limit.algorithm.summary}, ${describeKey(limit.key)}${
    limit.cost === 1 ? "" : `, cost ${limit.cost}`
  }`

/** @internal A route in one line: its name, what it matches, its limits and its mode. */
export const describeRoute = (route: Route): string => {
  const match = route.match
  const matched = match === undefined ? [] : [
    ...(match.methods === undefined ? [] : [match.methods.join(",")]),
    ...(match.host === undefined ? [] : [`host ${match.host}`]),
    ...(match.path === undefined ? [] : [match.path]),
    ...(match.prefix === undefined ? [] : [`${match.prefix} and below`])
  ]
  const limits = [
    ...route.limits.map(describeLimit),
    ...route.shadow.map((limit) => `shadow ${describeLimit(limit)}`)
  ]
  const mode = route.mode === "enforce"
    ? ""
    : route.mode === "delay"
    ? ` (delay, at most ${Duration.format(route.maxWait ?? Duration.zero)})`
    : " (shadow: nothing denied)"
  return `${route.name}${matched.length === 0 ? "" : ` (${matched.join(" ")})`}: ${
    limits.length === 0 ? "no limit" : limits.join("; ")
  }${mode}`
}
