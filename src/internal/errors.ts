/** @internal Errors of Redis calls: the reason of a failure, and the server's or the socket's own words. */
import type { EventEmitter } from "node:events"
import type * as Redis from "../Redis.js"
import * as core from "./service.js"

/** What a connection reports when it was lost with no error (the server, or something between, ended it). */
const LOST = "the connection to the server was lost"

const messageOf = (cause: unknown): string => cause instanceof Error ? cause.message : String(cause)

/** Error codes of a socket that could not reach the server, or lost it. */
const SOCKET_CODES = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ECONNABORTED",
  "EPIPE",
  "ETIMEDOUT",
  "ENOTFOUND",
  "EAI_AGAIN",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "EHOSTDOWN",
  "ENETDOWN"
])

const codeOf = (cause: unknown): unknown =>
  typeof cause === "object" && cause !== null && "code" in cause
    ? cause.code
    : undefined

/** @internal Sorts an ioredis or server failure into a reason. */
export const reasonOf = (cause: unknown): Redis.RedisErrorReason => {
  const message = messageOf(cause)
  if (message.startsWith("Command timed out")) return "Timeout"
  if (message.startsWith("READONLY")) return "ReadOnly"
  if (message.startsWith("OOM")) return "OutOfMemory"
  // Redis 6+ (WRONGPASS, NOAUTH), and Redis 5's word for a wrong password.
  if (/^(?:WRONGPASS|NOAUTH)\b/.test(message) || message.startsWith("ERR invalid password")) {
    return "Authentication"
  }
  if (
    SOCKET_CODES.has(codeOf(cause) as string) || message.startsWith("Connection is closed") ||
    message.startsWith("Reached the max retries") || message.startsWith("Stream isn't writeable") ||
    message.startsWith("connect ") || message.startsWith("getaddrinfo ") || message.includes("ECONN") ||
    message.includes("EPIPE") || message.includes("ETIMEDOUT") || message.startsWith("LOADING") ||
    message === LOST
  ) return "Connection"
  if (message.includes("user_script") || message.startsWith("NOSCRIPT") || message.includes("Error running script")) {
    return "Script"
  }
  return "Server"
}

/**
 * How ioredis reports a command it could not send, or a connection it could not make: words of its own,
 * which say nothing of why. The reason is the last error the connection reported (see {@link watch}).
 */
const isSymptom = (cause: unknown): boolean => {
  const message = messageOf(cause)
  return message.startsWith("Connection is closed") || message.startsWith("Reached the max retries") ||
    message.startsWith("Stream isn't writeable") || message === "None of startup nodes is available" ||
    message === "Failed to refresh slots cache."
}

/**
 * An error fit to keep and print: an authentication failure without ioredis's record of the AUTH or
 * HELLO command it answered, whose arguments are the password.
 */
const sanitized = (cause: unknown): unknown => {
  const command = typeof cause === "object" && cause !== null && "command" in cause
    ? (cause.command as { readonly name?: unknown } | undefined)
    : undefined
  const name = typeof command?.name === "string" ? command.name.toLowerCase() : ""
  if (name !== "auth" && name !== "hello") return cause
  const clean = new Error(messageOf(cause))
  clean.name = (cause as Error).name
  return clean
}

/** A cluster's "all nodes failed" error carries the last node's error: that one says why. */
const innermost = (cause: unknown): unknown => {
  const last = typeof cause === "object" && cause !== null && "lastNodeError" in cause
    ? cause.lastNodeError
    : undefined
  return last instanceof Error ? innermost(last) : cause
}

/**
 * @internal A `RedisError` for `operation`, which failed with `cause`. `last` gives the last error the
 * connection reported: when ioredis only says that it could not send (`Connection is closed.`), that
 * error is the cause instead, so the reason and the message are the server's (`WRONGPASS …`) or the
 * socket's (`connect ECONNREFUSED …`).
 */
export const redisError = (operation: string, cause: unknown, last?: () => unknown): Redis.RedisError => {
  const reported = last === undefined ? undefined : last()
  const root = sanitized(innermost(reported !== undefined && isSymptom(cause) ? reported : cause))
  return new core.RedisError({ reason: reasonOf(root), operation, cause: root })
}

/**
 * @internal A command's deadline passed: `Command timed out after 500 ms`, and what the connection last
 * reported, if anything (`… (the connection: connect ECONNREFUSED 127.0.0.1:6379)`): a reply lost with
 * the connection times out, and the loss is why.
 */
export const timedOut = (ms: number, last: (() => unknown) | undefined): Error => {
  const reported = last?.()
  return new Error(
    `Command timed out after ${ms} ms${reported === undefined ? "" : ` (the connection: ${messageOf(reported)})`}`
  )
}

/**
 * @internal Keeps the last error an owned client's connection reported (a socket error, or the server's
 * refusal of the credentials), until it is ready again, for {@link redisError}. It is also the client's
 * listener of `error`, without which ioredis prints every error on the console.
 */
export const watch = (client: EventEmitter & { readonly status: string }): () => unknown => {
  let last: unknown
  client.on("error", (error: unknown) => (last = error))
  // ioredis emits its events on the next tick: a connection it reconnects was lost, not closed by its owner.
  client.on("close", () => (last ??= client.status === "reconnecting" ? new Error(LOST) : undefined))
  client.on("ready", () => (last = undefined))
  return () => last
}
