/**
 * @internal The prelude of every operation: the Redis service, once the capability in scope has been
 * checked, in one step of the fiber. (Apart from capability.ts, which Capability.ts loads, so that this
 * module may load Redis.ts.)
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type * as Capability from "../Capability.js"
import * as Redis from "../Redis.js"
import { allows, readTag, violation, writeTag } from "./capability.js"

/** @internal Runs `f` with the Redis service, once the grant in scope is checked to allow writing `entity`. */
export const write = <E extends Capability.AnyEntity, A, Err>(
  entity: E,
  f: (redis: Redis.Redis) => Effect.Effect<A, Err>
): Effect.Effect<A, Err, Redis.Redis | Capability.Write<E>> =>
  Effect.contextWithEffect((context: Context.Context<Redis.Redis | Capability.Write<E>>) => {
    const grant = Option.getOrUndefined(Context.getOption(context, writeTag<E>()))
    return allows(grant, entity.kind) ? f(Context.unsafeGet(context, Redis.Redis)) : violation("write", entity.kind, grant)
  })

/** @internal {@link write}, for reading. */
export const read = <E extends Capability.AnyEntity, A, Err>(
  entity: E,
  f: (redis: Redis.Redis) => Effect.Effect<A, Err>
): Effect.Effect<A, Err, Redis.Redis | Capability.Read<E>> =>
  Effect.contextWithEffect((context: Context.Context<Redis.Redis | Capability.Read<E>>) => {
    const grant = Option.getOrUndefined(Context.getOption(context, readTag<E>()))
    return allows(grant, entity.kind) ? f(Context.unsafeGet(context, Redis.Redis)) : violation("read", entity.kind, grant)
  })
