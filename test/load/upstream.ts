/**
 * A fast local upstream for load tests and benchmarks: node:http on loopback, answering every request
 * with `200` and a fixed 13-byte body, over keep-alive connections.
 *
 * Run as a script (`tsx test/load/upstream.ts [port]`) it prints `listening <url>` once ready and runs
 * until SIGTERM or SIGINT; the proxy benchmark starts it that way, in a process of its own.
 */
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import { resolve as resolvePath } from "node:path"
import { fileURLToPath } from "node:url"

export const BODY = "hello, world\n"

export interface Upstream {
  readonly url: string
  readonly close: () => Promise<void>
}

/** Starts the upstream on 127.0.0.1 (port 0: a free one). */
export const startUpstream = (port = 0): Promise<Upstream> =>
  new Promise((resolve, reject) => {
    const body = Buffer.from(BODY)
    const server = http.createServer((request, response) => {
      // Drain whatever body the request has, then answer.
      request.resume()
      request.on("end", () => {
        response.writeHead(200, { "content-type": "text/plain", "content-length": body.length })
        response.end(body)
      })
    })
    server.keepAliveTimeout = 60_000
    server.once("error", reject)
    server.listen(port, "127.0.0.1", () => {
      const { port: bound } = server.address() as AddressInfo
      resolve({
        url: `http://127.0.0.1:${bound}`,
        close: () =>
          new Promise<void>((done) => {
            server.close(() => done())
            server.closeAllConnections()
          })
      })
    })
  })

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === resolvePath(process.argv[1])) {
  const upstream = await startUpstream(Number(process.argv[2] ?? 0))
  console.log(`listening ${upstream.url}`)
  const stop = () => void upstream.close().then(() => process.exit(0))
  process.once("SIGTERM", stop)
  process.once("SIGINT", stop)
}
