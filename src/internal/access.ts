/**
 * @internal The prelude of every operation: the Redis service, once the capability in scope has been
 * checked, in one step of the fiber. (Apart from capability.ts, which Capability.ts loads, so that this
 * module may load Redis.ts.)
 */
import * as Context from "effect/Context"
import type * as Effect from "effect/Effect"
import * as core from "effect/Effect"
import type * as Capability from "../Capability.js"
import * as Redis from "../Redis.js"
import { allows, type Keys, keys, type Verb, violation } from "./capability.js"

const cache = { read: new Map<string, Keys>(), write: new Map<string, Keys>() }

const keysOf = (verb: Verb, entity: Capability.AnyEntity): Keys => {
  let found = cache[verb].get(entity.kind)
  if (found === undefined) cache[verb].set(entity.kind, found = keys(verb, entity))
  return found
}

const checked = <A, Err, R>(
  verb: Verb,
  entity: Capability.AnyEntity,
  f: (redis: Redis.Service) => Effect.Effect<A, Err>
) => {
  const needed = keysOf(verb, entity)
  return core.contextWithEffect((context: Context.Context<R>) =>
    allows(context as Context.Context<never>, needed)
      ? f(Context.unsafeGet(context as Context.Context<Redis.Redis>, Redis.Redis))
      : violation(needed, context as Context.Context<never>)
  )
}

/** @internal Runs `f` with the Redis service, once the grant in scope is checked to allow writing `entity`. */
export const write = <E extends Capability.AnyEntity, A, Err>(
  entity: E,
  f: (redis: Redis.Service) => Effect.Effect<A, Err>
): Effect.Effect<A, Err, Redis.Redis | Capability.Write<E>> => checked("write", entity, f)

/** @internal {@link write}, for reading. */
export const read = <E extends Capability.AnyEntity, A, Err>(
  entity: E,
  f: (redis: Redis.Service) => Effect.Effect<A, Err>
): Effect.Effect<A, Err, Redis.Redis | Capability.Read<E>> => checked("read", entity, f)
