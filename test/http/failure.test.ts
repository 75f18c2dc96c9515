/**
 * The store-failure policy's one model (src/internal/http/failure.ts): each front end's input (the
 * middlewares' `onStoreFailure`, the proxy's `--on-store-failure`) normalized to exact values, and what each
 * policy does; the decisions a limit counts, derived from `RateLimit.Decision`.
 */
import { describe, expect, it } from "@effect/vitest"
import { RateLimit } from "wakuwaku/http"
import * as decision from "../../src/internal/http/decision.js"
import * as failure from "../../src/internal/http/failure.js"

describe("the store-failure policy, normalized once", () => {
  it("onStoreFailure: each public form gives its mode, and a fallback its own value", () => {
    expect(failure.fromOption("fail-closed")).toStrictEqual({ mode: "fail-closed", fallback: undefined })
    expect(failure.fromOption("fail-open")).toStrictEqual({ mode: "fail-open", fallback: undefined })
    const fallback = RateLimit.fallback({ maxEntries: 7 })
    const normalized = failure.fromOption(fallback)
    expect(normalized).toStrictEqual({ mode: "fallback", fallback })
    expect(normalized.fallback).toBe(fallback)
  })

  it("onStoreFailure: anything else is a TypeError naming the three", () => {
    for (const bad of ["fallback", "FAIL-OPEN", undefined, null, 503, { _tag: "Fallback" }]) {
      expect(() => failure.fromOption(bad)).toThrow(
        new TypeError(
          `wakuwaku/http: onStoreFailure must be "fail-closed", "fail-open" or RateLimit.fallback(…), got ${
            String(bad as unknown)
          }`
        )
      )
    }
  })

  it("--on-store-failure: a mode by its name, blanks around it ignored; nothing else, not even Object's keys", () => {
    expect(failure.fromFlag("fail-closed")).toBe("fail-closed")
    expect(failure.fromFlag("fail-open")).toBe("fail-open")
    expect(failure.fromFlag(" fallback\t")).toBe("fallback")
    for (const bad of ["retry", "", "Fallback", "toString", "__proto__", "constructor"]) {
      expect(failure.fromFlag(bad)).toBeUndefined()
    }
    expect(failure.FLAG_EXPECTED).toBe("expected fail-closed, fail-open or fallback")
    expect(failure.MODES).toEqual(["fail-closed", "fail-open", "fallback"])
  })

  it("the proxy's mode as the option Proxy.layer takes: fallback made of the proxy's --max-entries, others as named", () => {
    let made = 0
    const makeFallback = () => {
      made++
      return RateLimit.fallback({ maxEntries: 3 })
    }
    expect(failure.toOption("fail-closed", makeFallback)).toBe("fail-closed")
    expect(failure.toOption("fail-open", makeFallback)).toBe("fail-open")
    expect(made).toBe(0)
    const option = failure.toOption("fallback", makeFallback)
    expect(made).toBe(1)
    expect(RateLimit.FallbackTypeId in (option as object)).toBe(true)
    expect((option as RateLimit.Fallback).maxEntries).toBe(3)
    // Normalized again, it is the same policy.
    expect(failure.fromOption(option)).toStrictEqual({ mode: "fallback", fallback: option })
  })

  it("what each policy does: its decision while the store is down, its log line, whether the proxy needs the store at start", () => {
    expect(failure.POLICIES).toStrictEqual({
      "fail-closed": {
        decision: "fail-closed",
        pass: false,
        meanwhile: "requests are refused with 503 until it answers (fail-closed)",
        needsStoreAtStart: true
      },
      "fail-open": {
        decision: "fail-open",
        pass: true,
        meanwhile: "requests pass until it answers (fail-open)",
        needsStoreAtStart: false
      },
      fallback: {
        decision: undefined,
        pass: undefined,
        meanwhile: "the local fallback decides until it answers",
        needsStoreAtStart: false
      }
    })
  })

  it("the decisions a limit counts: every RateLimit.Decision, once", () => {
    expect(decision.DECISIONS).toEqual([
      "allowed",
      "denied",
      "unsplittable",
      "fallback-allowed",
      "fallback-denied",
      "fallback-unsplittable",
      "fail-open",
      "fail-closed"
    ])
  })
})
