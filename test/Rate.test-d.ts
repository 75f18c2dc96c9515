import { describe, expectTypeOf, it } from "vitest"
import { Rate } from "wakuwaku"

type Tokens = "a rate must refill at least one token"
type Period = "a rate's period must be longer than zero"

describe("Rate compile-time checks", () => {
  it("a rate must refill at least one token", () => {
    expectTypeOf<Rate.ValidTokens<0>>().toEqualTypeOf<Tokens>()
    expectTypeOf<Rate.ValidTokens<-3>>().toEqualTypeOf<Tokens>()
    expectTypeOf<Rate.ValidTokens<0.5>>().toEqualTypeOf<Tokens>()
    expectTypeOf<Rate.ValidTokens<1>>().toEqualTypeOf<1>()
    expectTypeOf<Rate.ValidTokens<number>>().toEqualTypeOf<number>()
    expectTypeOf<Parameters<typeof Rate.make<0, "3 seconds">>[0]>().toEqualTypeOf<Tokens>()
    // @ts-expect-error a rate must refill at least one token
    Rate.make(0, "3 seconds")
    expectTypeOf<Parameters<typeof Rate.make<-1, "3 seconds">>[0]>().toEqualTypeOf<Tokens>()
    // @ts-expect-error a rate must refill at least one token
    Rate.make(-1, "3 seconds")
    expectTypeOf<Parameters<typeof Rate.make<1.5, "3 seconds">>[0]>().toEqualTypeOf<Tokens>()
    // @ts-expect-error a rate must refill at least one token
    Rate.make(1.5, "3 seconds")
    expectTypeOf<Parameters<typeof Rate.perSecond<0>>[0]>().toEqualTypeOf<Tokens>()
    // @ts-expect-error a rate must refill at least one token
    Rate.perSecond(0)
  })

  it("a period must be longer than zero", () => {
    expectTypeOf<Rate.ValidPeriod<"0 seconds">>().toEqualTypeOf<Period>()
    expectTypeOf<Rate.ValidPeriod<"0 millis">>().toEqualTypeOf<Period>()
    expectTypeOf<Rate.ValidPeriod<"-1 seconds">>().toEqualTypeOf<Period>()
    expectTypeOf<Rate.ValidPeriod<0>>().toEqualTypeOf<Period>()
    expectTypeOf<Rate.ValidPeriod<0n>>().toEqualTypeOf<Period>()
    expectTypeOf<Rate.ValidPeriod<"3 seconds">>().toEqualTypeOf<"3 seconds">()
    expectTypeOf<Rate.ValidPeriod<1500>>().toEqualTypeOf<1500>()
    expectTypeOf<Rate.ValidPeriod<"0.0 seconds">>().toEqualTypeOf<Period>()
    expectTypeOf<Rate.ValidPeriod<"-0.5 seconds">>().toEqualTypeOf<Period>()
    expectTypeOf<Rate.ValidPeriod<readonly [0, 0]>>().toEqualTypeOf<Period>()
    expectTypeOf<Rate.ValidPeriod<readonly [0, 5]>>().toEqualTypeOf<readonly [0, 5]>()
    expectTypeOf<Rate.ValidPeriod<"0.5 seconds">>().toEqualTypeOf<"0.5 seconds">()
    expectTypeOf<Parameters<typeof Rate.make<1, "0 seconds">>[1]>().toEqualTypeOf<Period>()
    // @ts-expect-error a rate's period must be longer than zero
    Rate.make(1, "0 seconds")
    expectTypeOf<Parameters<typeof Rate.make<1, 0>>[1]>().toEqualTypeOf<Period>()
    // @ts-expect-error a rate's period must be longer than zero
    Rate.make(1, 0)
    // (A tuple argument such as [0, 0] is not inferred as a literal, so it is caught at run time instead.)
  })

  it("valid literals and run-time numbers compile", () => {
    expectTypeOf(Rate.make(1, "3 seconds")).toEqualTypeOf<Rate.Rate>()
    expectTypeOf(Rate.perSecond(50)).toEqualTypeOf<Rate.Rate>()
    const n: number = 7
    expectTypeOf(Rate.make(n, "1 minute")).toEqualTypeOf<Rate.Rate>()
  })
})
