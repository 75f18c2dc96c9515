/**
 * @internal Capabilities at run time: one context entry per verb and entity kind, plus one per verb for
 * every entity (`"all"`). A grant layer outputs exactly the entries it grants, so Effect's own context
 * algebra gives at run time what `Exclude` gives in `R`: `Layer.merge`, `Layer.mergeAll` and
 * `Layer.provideMerge` add up, `Layer.provide(self, that)` outputs `self`'s alone, and an inner
 * `Effect.provide` adds to the outer one. No entry is ever replaced by another kind's.
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import type * as Capability from "../Capability.js"

/** @internal */
export type Verb = "read" | "write"

/** @internal What a grant entry holds: the verb and the kind it grants (`undefined`: every kind). */
export interface Grant {
  readonly verb: Verb
  readonly kind: string | undefined
}

const PREFIX = { read: "wakuwaku/Capability/Read", write: "wakuwaku/Capability/Write" } as const

/** @internal The context key granting `verb` of every entity. */
export const allKey = (verb: Verb): string => `${PREFIX[verb]}/*`

/** @internal The context key granting `verb` of entities of `kind`. */
export const kindKey = (verb: Verb, kind: string): string => `${PREFIX[verb]}:${kind}`

const tagOf = (key: string) => Context.GenericTag<Grant>(key)

const entries = (verb: Verb, entities: Capability.Entities): ReadonlyArray<readonly [string, Grant]> =>
  entities === "all"
    ? [[allKey(verb), { verb, kind: undefined }]]
    : entities.map((entity) => [kindKey(verb, entity.kind), { verb, kind: entity.kind }] as const)

/** @internal A layer that outputs exactly the grants listed, and nothing else. */
export const layer = <Granted>(read: Capability.Entities, write: Capability.Entities): Layer.Layer<Granted> => {
  let context = Context.empty() as Context.Context<unknown>
  for (const [key, grant] of [...entries("read", read), ...entries("write", write)]) {
    context = Context.add(context, tagOf(key), grant)
  }
  return Layer.succeedContext(context as Context.Context<Granted>)
}

/** @internal Whether `context` grants `verb` of `kind`: the kind's entry, or the entry for every kind. */
export const allows = (context: Context.Context<never>, keys: Keys): boolean =>
  context.unsafeMap.has(keys.kind) || context.unsafeMap.has(keys.all)

/** @internal The two keys that may grant an operation, computed once per entity and verb. */
export interface Keys {
  readonly verb: Verb
  readonly entityKind: string
  readonly kind: string
  readonly all: string
}

/** @internal */
export const keys = (verb: Verb, entity: Capability.AnyEntity): Keys => ({
  verb,
  entityKind: entity.kind,
  kind: kindKey(verb, entity.kind),
  all: allKey(verb)
})

/** @internal What `context` grants for `verb`, for messages: `all`, the kinds, or `nothing`. */
export const granted = (context: Context.Context<never>, verb: Verb): string => {
  if (context.unsafeMap.has(allKey(verb))) return "all"
  const kinds: Array<string> = []
  for (const value of context.unsafeMap.values()) {
    const grant = value as Partial<Grant> | undefined
    if (grant?.verb === verb && typeof grant.kind === "string") kinds.push(grant.kind)
  }
  return kinds.length === 0 ? "nothing" : kinds.sort().join(", ")
}

/**
 * @internal The defect of a violated grant. The operation's type required the capability, so whatever
 * removed that requirement escaped the compiler's check. The message lists the usual ways and asserts none:
 * a cast is only one of them (a mutable tuple emptied with `pop()` after its type was fixed is another, with no cast).
 */
export const violation = (keys: Keys, context: Context.Context<never>): Effect.Effect<never> => {
  const needed = `Capability.${keys.verb === "read" ? "Read" : "Write"}<${keys.entityKind}>`
  return Effect.dieMessage(
    `wakuwaku: this operation needs to ${keys.verb} ${keys.entityKind}, ` +
      `but the capability in scope does not grant it (granted: ${granted(context, keys.verb)}). ` +
      `The program's type claimed ${needed} all the same: something the compiler could not check stands ` +
      `in between, such as a cast, an \`any\`, a @ts-ignore, or a grant list changed after its type was fixed.`
  )
}
