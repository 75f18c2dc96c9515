/** @internal */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type * as Capability from "../Capability.js"

/** @internal What a layer granted at run time: every kind (`"all"`) or a set of entity kinds. */
export type Kinds = "all" | ReadonlySet<string>

/** @internal The run-time value behind every `Read<E>` and every `Write<E>`. */
export interface Grant {
  readonly kinds: Kinds
}

const ReadTag = Context.GenericTag<Capability.Read<Capability.AnyEntity>, Grant>("wakuwaku/Capability/Read")
const WriteTag = Context.GenericTag<Capability.Write<Capability.AnyEntity>, Grant>("wakuwaku/Capability/Write")

/** @internal All `Read<E>` share this one tag, so a grant is looked up the same way whatever E is. */
export const readTag = <E extends Capability.AnyEntity>() =>
  ReadTag as unknown as Context.Tag<Capability.Read<E>, Grant>

/** @internal All `Write<E>` share this one tag. */
export const writeTag = <E extends Capability.AnyEntity>() =>
  WriteTag as unknown as Context.Tag<Capability.Write<E>, Grant>

const union = (a: Kinds, b: Kinds): Kinds =>
  a === "all" || b === "all" ? "all" : new Set([...a, ...b])

const kindsOf = (entities: "all" | ReadonlyArray<Capability.AnyEntity>): Kinds =>
  entities === "all" ? "all" : new Set(entities.map((entity) => entity.kind))

/**
 * @internal A grant that adds to whatever the enclosing context already grants, so a narrower layer
 * provided inside a broader one keeps the broader rights at run time, exactly as `Exclude` does in R.
 */
const grantLayer = (tag: Context.Tag<unknown, Grant>, kinds: Kinds) =>
  Layer.effect(
    tag,
    Effect.map(Effect.serviceOption(tag), (outer) => ({
      kinds: Option.match(outer, { onNone: () => kinds, onSome: (grant) => union(grant.kinds, kinds) })
    }))
  )

/**
 * @internal Installs only the tags it grants something for, so that merged with a sibling that grants
 * the other access (`Layer.merge(Capability.layer({ write }), Redis.layerReadOnly())`) neither erases
 * the other. Two siblings that both grant writes still share the one Write tag, and the later wins:
 * grants combine by nesting, which the module doc says.
 */
export const layer = <Granted>(
  read: "all" | ReadonlyArray<Capability.AnyEntity>,
  write: "all" | ReadonlyArray<Capability.AnyEntity>
): Layer.Layer<Granted> => {
  const layers = [
    ...(read === "all" || read.length > 0 ? [grantLayer(readTag() as Context.Tag<unknown, Grant>, kindsOf(read))] : []),
    ...(write === "all" || write.length > 0 ? [grantLayer(writeTag() as Context.Tag<unknown, Grant>, kindsOf(write))] : [])
  ]
  return (layers.length === 0 ? Layer.empty : Layer.mergeAll(...(layers as [Layer.Layer<unknown>]))) as Layer.Layer<
    unknown
  > as Layer.Layer<Granted>
}

/** @internal */
export const allows = (grant: Grant | undefined, kind: string): boolean =>
  grant !== undefined && (grant.kinds === "all" || grant.kinds.has(kind))

/** @internal The defect of a violated grant, which only a cast can cause. */
export const violation = (verb: "read" | "write", kind: string, grant: Grant | undefined): Effect.Effect<never> =>
  Effect.dieMessage(
    `wakuwaku: this operation needs to ${verb} ${kind}, but the capability in scope does not grant it ` +
      `(granted: ${grant === undefined ? "nothing" : grant.kinds === "all" ? "all" : [...grant.kinds].join(", ") || "nothing"}). ` +
      `A cast has hidden a missing Capability.${verb === "read" ? "Read" : "Write"}<${kind}> from the compiler.`
  )
