import { Duration } from "effect"
import { describe, expect, it } from "vitest"
import { Rate, TokenBucket } from "wakuwaku"

describe("Rate", () => {
  it("holds tokens, the period and the period in whole microseconds", () => {
    const rate = Rate.make(1, "3 seconds")
    expect(rate.tokens).toBe(1)
    expect(Duration.toMillis(rate.period)).toBe(3000)
    expect(rate.periodMicros).toBe(3_000_000)
    expect(Rate.perSecond(50)).toMatchObject({ tokens: 50, periodMicros: 1_000_000 })
    expect(String(rate)).toBe("1 per 3s")
  })

  it("rounds the period up to whole microseconds, at least 1", () => {
    expect(Rate.make(1, "1 nano").periodMicros).toBe(1)
    expect(Rate.make(1, "1500 nanos").periodMicros).toBe(2)
    expect(Rate.make(1, Duration.micros(7n)).periodMicros).toBe(7)
  })

  it("throws at construction on run-time values that refill nothing", () => {
    const values: ReadonlyArray<number> = [0, -1, 1.5, Number.NaN, Number.POSITIVE_INFINITY, 2 ** 53]
    for (const tokens of values) {
      expect(() => Rate.make(tokens, "1 second")).toThrow(/a rate must refill at least one token/)
      expect(() => Rate.perSecond(tokens)).toThrow(/a rate must refill at least one token/)
    }
    const periods: ReadonlyArray<Duration.DurationInput> = [0, Duration.zero, "0 seconds", -5]
    for (const period of periods) {
      expect(() => Rate.make(1, period)).toThrow(/a rate's period must be longer than zero/)
    }
    expect(() => Rate.make(1, Duration.infinity)).toThrow(/a rate's period must be finite/)
    expect(() => Rate.make(1, Duration.days(1e9))).toThrow(/at most 2\^53 - 1 microseconds/)
  })
})

describe("TokenBucket.make", () => {
  it("is a plain immutable value exposing namespace, capacity and rate", () => {
    const rate = Rate.make(1, "3 seconds")
    const LOGINS = TokenBucket.make<string>("login", 20, rate)
    expect(LOGINS.namespace).toBe("login")
    expect(LOGINS.capacity).toBe(20)
    expect(LOGINS.rate).toBe(rate)
    expect(Object.isFrozen(LOGINS)).toBe(true)
    expect(String(LOGINS)).toBe("TokenBucket(login): capacity 20, 1 per 3s")
  })

  it("throws on an invalid capacity", () => {
    const capacities: ReadonlyArray<number> = [-1, 1.5, Number.NaN, Number.POSITIVE_INFINITY, 2 ** 53]
    for (const capacity of capacities) {
      expect(() => TokenBucket.make("x", capacity, Rate.perSecond(1))).toThrow(
        /capacity must be a non-negative safe integer/
      )
    }
  })

  it("throws on a rate not made by Rate.make, and on a bucket that would take over 1e14 ms to fill", () => {
    const forged = { tokens: 0, period: Duration.seconds(1), periodMicros: 1_000_000 } as unknown as Rate.Rate
    expect(() => TokenBucket.make("x", 5, forged)).toThrow(/needs a rate made by Rate.make/)
    expect(() => TokenBucket.make("x", 20_000, Rate.make(1, Duration.days(100_000)))).toThrow(/more than 1e14 ms/)
    expect(TokenBucket.make("x", 1_000, Rate.make(1, Duration.days(1_000))).capacity).toBe(1_000)
  })

  it("throws on a namespace that is not a short word", () => {
    for (const namespace of ["", "a:b", "{tag}", "has space"]) {
      expect(() => TokenBucket.make(namespace, 1, Rate.perSecond(1))).toThrow(/namespace must be a non-empty string/)
    }
  })
})
