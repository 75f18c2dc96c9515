/** @internal The plain commands of the embedded backend (what `Redis.command` runs), on its keyspace. */
import type * as Script from "../../Script.js"
import { ReplyError } from "../script.js"
import { type Db, integer } from "./keyspace.js"

/** @internal */
export const upper = (s: string | number) => String(s).toUpperCase()

/**
 * @internal Runs one plain command at the current time of `db`; `kill` ends a dedicated connection by id
 * (`CLIENT KILL ID`), answering 1 or 0. Throws a ReplyError for an error reply.
 */
export const command = (
  db: Db,
  name: string,
  args: ReadonlyArray<string | number>,
  kill: (id: number) => number
): Script.Reply => {
  const s = args.map(String)
  const arity = (min: number, max = min) => {
    if (s.length < min || s.length > max) {
      throw new ReplyError(`ERR wrong number of arguments for '${name.toLowerCase()}' command`)
    }
  }
  switch (upper(name)) {
    case "GET":
      arity(1)
      return db.get(s[0]!)
    case "SET": {
      if (s.length < 2) arity(2)
      let px: number | undefined
      let nx = false
      for (let i = 2; i < s.length; i++) {
        const option = upper(s[i]!)
        if (option === "NX") nx = true
        else if (option === "PX" && i + 1 < s.length) px = integer(s[++i]!)
        else if (option === "EX" && i + 1 < s.length) px = integer(s[++i]!) * 1000
        else throw new ReplyError("ERR syntax error")
      }
      return db.set(s[0]!, s[1]!, { ...(px === undefined ? {} : { px }), nx })
    }
    case "DEL":
      arity(1, Infinity)
      return db.del(...s)
    case "EXISTS":
      arity(1, Infinity)
      return db.exists(...s)
    case "TYPE":
      arity(1)
      return db.type(s[0]!)
    case "PTTL":
      arity(1)
      return db.pttl(s[0]!)
    case "PEXPIRE":
      arity(2, 3)
      if (s[2] !== undefined && upper(s[2]) !== "GT") throw new ReplyError("ERR Unsupported option " + s[2])
      return db.pexpire(s[0]!, s[1]!, s[2] !== undefined)
    case "RPUSH":
      arity(2, Infinity)
      return db.rpush(s[0]!, ...s.slice(1))
    case "LPUSH":
      arity(2, Infinity)
      return db.lpush(s[0]!, ...s.slice(1))
    case "LPOP": {
      arity(1, 2)
      if (s[1] !== undefined) return db.lpop(s[0]!, s[1])
      return db.lpop(s[0]!, 1)?.[0] ?? null
    }
    case "LLEN":
      arity(1)
      return db.llen(s[0]!)
    case "LINDEX":
      arity(2)
      return db.lindex(s[0]!, integer(s[1]!))
    case "LRANGE":
      arity(3)
      return db.lrange(s[0]!, integer(s[1]!), integer(s[2]!))
    case "LMOVE":
      arity(4)
      return db.lmove(s[0]!, s[1]!, side(s[2]!), side(s[3]!))
    case "ZADD":
      arity(3)
      return db.zadd(s[0]!, Number(s[1]!), s[2]!)
    case "ZCARD":
      arity(1)
      return db.zcard(s[0]!)
    case "ZSCORE":
      arity(2)
      return db.zscore(s[0]!, s[1]!)
    case "ZRANGE":
      arity(3, 4)
      if (s[3] === undefined) {
        return db.zrangeWithScores(s[0]!, integer(s[1]!), integer(s[2]!)).filter((_, i) => i % 2 === 0)
      }
      if (upper(s[3]) !== "WITHSCORES") throw new ReplyError("ERR syntax error")
      return db.zrangeWithScores(s[0]!, integer(s[1]!), integer(s[2]!))
    case "DBSIZE":
      arity(0)
      return db.entries.size
    case "KEYS":
      arity(1)
      return db.keys(s[0]!)
    case "SCAN": {
      // One pass: every match, and cursor 0.
      let pattern = "*"
      for (let i = 1; i < s.length; i += 2) if (upper(s[i]!) === "MATCH") pattern = s[i + 1] ?? "*"
      return ["0", db.keys(pattern)]
    }
    case "FLUSHALL":
    case "FLUSHDB":
      db.entries.clear()
      return "OK"
    case "TIME":
      arity(0)
      return [String(Math.floor(db.now / 1e6)), String(db.now % 1e6)]
    case "PING":
      return "PONG"
    case "CLIENT": {
      // CLIENT KILL ID <id>: ends that dedicated connection (a blocked BLMOVE fails at once).
      if (upper(s[0] ?? "") === "KILL" && upper(s[1] ?? "") === "ID" && s.length === 3) {
        return kill(integer(s[2]!))
      }
      throw new ReplyError(`ERR unknown subcommand '${s[0] ?? ""}' (the memory backend knows CLIENT KILL ID)`)
    }
    default:
      throw new ReplyError(
        `ERR unknown command '${name}' (the memory backend implements the commands the library uses)`
      )
  }
}

/** @internal LEFT or RIGHT. */
export const side = (s: string): "LEFT" | "RIGHT" => {
  const u = upper(s)
  if (u !== "LEFT" && u !== "RIGHT") throw new ReplyError("ERR syntax error")
  return u
}
