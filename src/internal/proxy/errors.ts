/**
 * @internal The proxy's tag, its errors and their statuses. A leaf under Proxy.ts: it imports the public
 * module for types only, so that Proxy.ts and the internals it loads never import each other.
 */
import * as Context from "effect/Context"
import * as Schema from "effect/Schema"
import type * as Proxy from "../../Proxy.js"

/** @internal Each failure's status, its Proxy-Status error type (RFC 9209) and its text. */
export const STATUS: Record<
  Proxy.ProxyErrorReason,
  { readonly status: number; readonly type: string; readonly text: string }
> = {
  Refused: { status: 502, type: "connection_refused", text: "the upstream refused the connection" },
  Reset: { status: 502, type: "connection_terminated", text: "the upstream closed the connection without a response" },
  Unresolved: { status: 502, type: "dns_error", text: "the upstream's host name did not resolve" },
  Unreachable: { status: 502, type: "destination_unavailable", text: "the upstream could not be reached" },
  Protocol: { status: 502, type: "http_protocol_error", text: "the upstream's response was not valid HTTP" },
  ConnectTimeout: { status: 504, type: "connection_timeout", text: "connecting to the upstream timed out" },
  Timeout: { status: 504, type: "http_response_timeout", text: "the upstream did not respond in time" },
  RequestBody: { status: 400, type: "http_request_error", text: "the request body could not be read" }
}

/** @internal */
export const ProxyErrorReason: Proxy.ProxyErrorReasonSchema = Schema.Literal(
  "Refused",
  "Reset",
  "Unresolved",
  "Unreachable",
  "Protocol",
  "ConnectTimeout",
  "Timeout",
  "RequestBody"
)

/** @internal */
export class ProxyError extends Schema.TaggedError<Proxy.ProxyError>("wakuwaku/ProxyError")("ProxyError", {
  reason: ProxyErrorReason,
  cause: Schema.Defect
}) {
  get status(): number {
    return STATUS[this.reason].status
  }
  override get message(): string {
    return `${this.status} ${STATUS[this.reason].text}`
  }
}

/** @internal */
export const Server: Context.Tag<Proxy.Server, Proxy.Server["Type"]> = Context.GenericTag<
  Proxy.Server,
  Proxy.Server["Type"]
>("wakuwaku/Proxy/Server")

/** @internal */
export class ListenError extends Schema.TaggedError<Proxy.ListenError>("wakuwaku/Proxy/ListenError")("ListenError", {
  port: Schema.Number,
  host: Schema.optional(Schema.String),
  cause: Schema.Defect
}) {
  override get message(): string {
    return `cannot listen: ${this.cause instanceof Error ? this.cause.message : String(this.cause)}`
  }
}
