/**
 * Capabilities: what a program may read and write in Redis, checked by the compiler.
 *
 * This is wakuwaku's processor model carried into Effect's requirement channel. Every operation names
 * in its `R` what it touches: `TokenBucket.acquire` needs `Redis | Write<TokenBucket.Entity>`, a
 * read needs `Read<E>`. A layer grants capabilities, and `Effect.provide` removes what it grants from
 * `R` (by `Exclude`). A program that still needs a `Write<…>` after everything is provided does not
 * compile, and the error names the missing `Write<…>`.
 *
 * - `Read<out E>` and `Write<out E>` are covariant, so granting `Write<AnyEntity>` satisfies every
 *   `Write<E>`, while granting `Write<Entity<"Lock">>` satisfies only writes of locks.
 * - `Redis.layer` grants {@link ReadWrite} (a primary); `Redis.layerReadOnly` grants only
 *   {@link ReadOnly} (a replica): a program that writes through it does not compile.
 * - Nothing lives in Redis for a capability. At run time every operation checks the grant in scope
 *   once more and dies on a violation, which only a cast can cause.
 *
 * **The algebra of grants.** Whatever way grant layers are composed, the run time grants exactly what
 * the type says, because each entity kind (and "every entity") is its own entry of the context:
 * - a grant layer grants exactly the reads and writes it lists (`"all"`: every entity, custom ones too);
 * - `Layer.merge`, `Layer.mergeAll` and `Layer.provideMerge(self, that)` grant the union of their parts;
 * - `Layer.provide(self, that)` grants what `self` grants, and nothing of `that` (which only feeds
 *   `self`'s requirements);
 * - nested `Effect.provide`s add up: a narrower grant inside a broader one keeps the broader rights;
 * - reads and writes are apart: granting `Write<E>` grants no `Read<E>`, and the reverse.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Capability, Rate, Redis, TokenBucket } from "wakuwaku"
 *
 * const LOGINS = TokenBucket.make<string>("login", 20, Rate.make(1, "3 seconds"))
 *
 * // May write token buckets and nothing else.
 * const LimiterOnly = Capability.layer({ read: "all", write: [TokenBucket.entity] })
 *
 * export const program = LOGINS.acquire("203.0.113.7", 1).pipe(
 *   Effect.provide(LimiterOnly),
 *   Effect.provide(Redis.layerReadOnly({ url: "redis://127.0.0.1:6379" }))
 * )
 * ```
 *
 * @since 0.1.0
 */
import type * as Layer from "effect/Layer"
import type * as Types from "effect/Types"
import * as internal from "./internal/capability.js"

/**
 * A kind of structure that operations read or write, such as `Entity<"TokenBucket">`. The literal
 * `kind` keeps entities nominal: two entities never collapse into one.
 *
 * @since 0.1.0
 * @category models
 */
export interface Entity<Kind extends string = string> {
  readonly kind: Kind
}

/**
 * Every entity: `Write<AnyEntity>` grants writes of everything.
 *
 * @since 0.1.0
 * @category models
 */
export type AnyEntity = Entity<string>

/**
 * Declares an entity with a literal kind.
 *
 * @since 0.1.0
 * @category constructors
 */
export const entity = <const Kind extends string>(
  kind: string extends Kind ? "an entity's kind must be a string literal" : Kind
): Entity<Kind> => Object.freeze({ kind: kind as Kind })

/**
 * @since 0.1.0
 * @category type ids
 */
export const ReadTypeId: unique symbol = Symbol.for("wakuwaku/Capability/Read")

/**
 * @since 0.1.0
 * @category type ids
 */
export type ReadTypeId = typeof ReadTypeId

/**
 * @since 0.1.0
 * @category type ids
 */
export const WriteTypeId: unique symbol = Symbol.for("wakuwaku/Capability/Write")

/**
 * @since 0.1.0
 * @category type ids
 */
export type WriteTypeId = typeof WriteTypeId

/**
 * The right to read entities of type `E`. Covariant: `Read<AnyEntity>` satisfies every `Read<E>`.
 *
 * @since 0.1.0
 * @category models
 */
export interface Read<out E extends AnyEntity> {
  readonly [ReadTypeId]: { readonly _E: Types.Covariant<E> }
}

/**
 * The right to write entities of type `E`. Covariant: `Write<AnyEntity>` satisfies every `Write<E>`.
 *
 * @since 0.1.0
 * @category models
 */
export interface Write<out E extends AnyEntity> {
  readonly [WriteTypeId]: { readonly _E: Types.Covariant<E> }
}

/**
 * Which entities a custom capability grants: `"all"`, or a list of entities.
 *
 * @since 0.1.0
 * @category models
 */
export type Entities = "all" | ReadonlyArray<AnyEntity>

/**
 * The capabilities granted for some entities.
 *
 * @since 0.1.0
 * @category models
 */
export type Granted<Cap extends "Read" | "Write", Es extends Entities> = Es extends "all" ?
  Cap extends "Read" ? Read<AnyEntity>
  : Write<AnyEntity>
  // An entity whose kind is not a literal grants nothing: it would otherwise pass for every entity.
  : Es extends ReadonlyArray<infer E> ?
    E extends AnyEntity ? string extends E["kind"] ? never : Cap extends "Read" ? Read<E> : Write<E> : never
  : never

/**
 * Grants reads of every entity and no writes: what a read-only replica allows.
 *
 * @since 0.1.0
 * @category layers
 */
export const ReadOnly: Layer.Layer<Read<AnyEntity>> = internal.layer("all", [])

/**
 * Grants reads and writes of every entity: what a primary allows.
 *
 * @since 0.1.0
 * @category layers
 */
export const ReadWrite: Layer.Layer<Read<AnyEntity> | Write<AnyEntity>> = internal.layer("all", "all")

/**
 * A custom capability: reads and writes of the entities listed (none when omitted). It adds to the
 * grant of the enclosing context, and merges with sibling grants, at compile time and at run time alike.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = <const R extends Entities = readonly [], const W extends Entities = readonly []>(grant: {
  readonly read?: R | undefined
  readonly write?: W | undefined
}): Layer.Layer<Granted<"Read", R> | Granted<"Write", W>> => internal.layer(grant.read ?? [], grant.write ?? [])
