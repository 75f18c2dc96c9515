/** The types of parse-prometheus-text-format (it ships none): prom2json's shape, every value a string. */
declare module "parse-prometheus-text-format" {
  interface Sample {
    readonly value?: string
    readonly labels?: Readonly<Record<string, string>>
    /** A histogram's buckets by `le` (the parser merges them across label sets). */
    readonly buckets?: Readonly<Record<string, string>>
    readonly quantiles?: Readonly<Record<string, string>>
    readonly count?: string
    readonly sum?: string
  }
  interface Family {
    readonly name: string
    readonly help: string
    readonly type: "COUNTER" | "GAUGE" | "HISTOGRAM" | "SUMMARY" | "UNTYPED"
    readonly metrics: ReadonlyArray<Sample>
  }
  const parse: (text: string) => Array<Family>
  export default parse
}
