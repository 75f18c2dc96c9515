/**
 * @internal What a Redis Cluster client needs besides routing by key: keyspace commands on every master, and
 * the master of a slot.
 */
import keySlot from "cluster-key-slot"
import type { Cluster, Redis as IORedis } from "ioredis"

/**
 * @internal Keyless commands about the whole keyspace: on a cluster they run on every master, and the replies
 * merge.
 */
export const EVERY_MASTER = new Set(["SCAN", "KEYS", "DBSIZE", "FLUSHALL", "FLUSHDB"])

/**
 * @internal Runs a keyspace command on every master: SCAN scans each to the end (the reply is cursor "0" and every
 * key), KEYS concatenates, DBSIZE sums, FLUSHALL flushes each.
 */
export const onEveryMaster = async (
  cluster: Cluster,
  name: string,
  args: ReadonlyArray<string | number>
): Promise<unknown> => {
  const masters = cluster.nodes("master")
  switch (name.toUpperCase()) {
    case "SCAN": {
      const rest = args.slice(1)
      const keys = await Promise.all(masters.map(async (node) => {
        const found: Array<string> = []
        let cursor = "0"
        do {
          const [next, batch] = (await node.call("SCAN", cursor, ...rest)) as [string, Array<string>]
          found.push(...batch)
          cursor = next
        } while (cursor !== "0")
        return found
      }))
      return ["0", keys.flat()]
    }
    case "KEYS":
      return (await Promise.all(masters.map((node) => node.call(name, ...args) as Promise<Array<string>>))).flat()
    case "DBSIZE":
      return (await Promise.all(masters.map((node) => node.call(name, ...args) as Promise<number>))).reduce(
        (a, b) => a + b,
        0
      )
    default:
      await Promise.all(masters.map((node) => node.call(name, ...args)))
      return "OK"
  }
}

/** @internal The connection of `cluster` to the master that serves `key`'s slot. */
export const masterOf = (cluster: Cluster, key: string): IORedis => {
  const address = cluster.slots[keySlot(key)]?.[0]
  const master = cluster.nodes("master").find((node) => `${node.options.host}:${node.options.port}` === address)
  if (master === undefined) {
    throw new Error(`no master known for the slot of ${JSON.stringify(key)} (is the cluster ready?)`)
  }
  return master
}
