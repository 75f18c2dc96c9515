/** @internal The demo upstream of `wakuwaku proxy --demo`: a tiny server that says what reached it. */
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import * as Http from "node:http"
import type { AddressInfo } from "node:net"

/** @internal Starts the demo upstream on a free loopback port for the scope; succeeds with its URL. */
export const demoUpstream: Effect.Effect<string, Error, Scope.Scope> = Effect.acquireRelease(
  Effect.async<Http.Server, Error>((resume) => {
    const server = Http.createServer((request, response) => {
      // Read (and drop) any body, then say what arrived.
      let bytes = 0
      request.on("data", (chunk: Buffer) => {
        bytes += chunk.length
      })
      request.on("end", () => {
        const seen = ["x-forwarded-for", "x-forwarded-host", "x-forwarded-proto"]
          .map((name) => `${name}: ${String(request.headers[name] ?? "(none)")}`)
        response.writeHead(200, { "content-type": "text/plain; charset=utf-8" })
        response.end(
          [
            "Hello from the demo upstream, behind wakuwaku proxy.",
            `${request.method} ${request.url}${bytes > 0 ? ` (${bytes} bytes of body)` : ""}`,
            ...seen,
            ""
          ].join("\n")
        )
      })
    })
    server.once("error", (error) => resume(Effect.fail(error)))
    server.listen(0, "127.0.0.1", () => resume(Effect.succeed(server)))
  }),
  (server) =>
    Effect.async<void>((resume) => {
      server.close(() => resume(Effect.void))
      server.closeAllConnections()
    })
).pipe(Effect.map((server) => `http://127.0.0.1:${(server.address() as AddressInfo).port}`))
