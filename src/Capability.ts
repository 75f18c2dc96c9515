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
 *   once more and dies on a violation, which takes something the compiler cannot check (a cast, an
 *   `any`, a `@ts-ignore`, a grant list changed after its type was fixed); the defect says so.
 *
 * **What a grant list grants.** Its type grants only what the compiler knows the list holds, never
 * more than the run time allows:
 * - `"all"` grants every entity, custom ones too; a tuple (an inline list, or one `as const`) grants
 *   each of its fixed elements, and the run time grants exactly the list;
 * - a list that may be one of several, such as `cond ? [A, B] : [A]` (a union of tuples), grants what
 *   every possibility grants (here `A`), and `"all"` among them grants what the others grant;
 * - an array type (`Array<E>`, `ReadonlyArray<E>`: `const list = [A]` without `as const`) may hold
 *   anything or nothing, so `layer` refuses it ("a grant list must be a tuple…");
 * - an element typed with a union of kinds (`Entity<"A" | "B">`) or with `string` grants nothing, and
 *   {@link entity} refuses such a kind.
 * A program that needs more than its grants' types grant does not compile, and the error names the
 * missing `Write<…>`, even when the run time would have held it in some branch.
 *
 * **The algebra of grants.** Whatever way grant layers are composed, the run time grants exactly what
 * the layers hold, because each entity kind (and "every entity") is its own entry of the context, and
 * the types follow the same algebra:
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
 * Declares an entity with a literal kind. The kind must be exactly one string literal: an entity typed
 * with a union of kinds, or with `string`, would pass for entities it is not.
 *
 * @since 0.1.0
 * @category constructors
 */
export const entity = <const Kind extends string>(
  kind: [KindError<Kind>] extends [never] ? Kind : KindError<Kind>
): Entity<Kind> => Object.freeze({ kind: kind as Kind })

/** Why `Kind` is not one string literal, or `never` when it is. */
type KindError<Kind> = {} extends Record<Kind & string, unknown> ? "an entity's kind must be a string literal"
  : [Kind] extends [Types.UnionToIntersection<Kind>] ? never
  : "an entity's kind must be one string literal, not a union"

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
 * The capabilities granted for some entities: only what the type says for certain the list holds.
 * `"all"` grants every kind; a tuple grants its fixed elements typed with one literal kind; an array
 * type (which may be empty) grants nothing; a union of these, such as the type of `cond ? [A, B] : [A]`,
 * grants only what every one of its members grants (here `A`).
 *
 * @since 0.1.0
 * @category models
 */
export type Granted<Cap extends "Read" | "Write", Es extends Entities> = [Es] extends [never] ? never
  : [Es] extends ["all"] ? Cap extends "Read" ? Read<AnyEntity> : Write<AnyEntity>
  : Listed<Es> extends infer E ?
    E extends AnyEntity ? InEvery<E["kind"], Es> extends true ? Cap extends "Read" ? Read<E> : Write<E> : never
    : never
  : never

/** Whether every member of `Es` grants `Kind`: `"all"` does, a list when it surely holds it. */
type InEvery<Kind, Es> = [Es extends "all" ? never : Kind extends Listed<Es>["kind"] ? never : Es] extends [never] ?
  true
  : false

/** The entities a grant list surely holds: its fixed elements, each typed with one literal kind. */
type Listed<Es> = Es extends readonly [infer Head, ...infer Rest] ? OneKind<Head> | Listed<Rest>
  : Es extends readonly [...infer Init, infer Last] ? OneKind<Last> | Listed<Init>
  : never

/** `E` when it is an entity of one literal kind, else `never`. Not distributive: a union grants nothing. */
type OneKind<E> = [E] extends [AnyEntity] ? [KindError<E["kind"]>] extends [never] ? E : never : never

/** Whether the compiler knows a grant list's members: `"all"`, or a tuple with a fixed element or none. */
type IsExact<Es> = Es extends "all" ? true
  : Es extends ReadonlyArray<unknown> ?
    number extends Es["length"] ?
      Es extends readonly [unknown, ...Array<unknown>] | readonly [...Array<unknown>, unknown] ? true
      : false
    : true
  : true

/** What `layer` asks of a list beyond its type: nothing when the list is exact, else a readable refusal. */
type Checked<Key extends "read" | "write", Es> = false extends IsExact<Es> ? {
    readonly [K in Key]:
      "a grant list must be a tuple (inline, or `as const`): an array type does not say what it holds"
  }
  : unknown

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
 * A list must be `"all"` or a tuple; its type grants what {@link Granted} says, never more than the
 * list holds at run time.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = <const R extends Entities = readonly [], const W extends Entities = readonly []>(
  grant:
    & { readonly read?: R | undefined; readonly write?: W | undefined }
    // Apart, and not inferred from, so that inline lists still infer as tuples.
    & NoInfer<Checked<"read", R> & Checked<"write", W>>
): Layer.Layer<Granted<"Read", R> | Granted<"Write", W>> => internal.layer(grant.read ?? [], grant.write ?? [])
