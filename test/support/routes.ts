/** What the routes' tests share: the example configuration of docs/http.md. */
import { readFileSync } from "node:fs"

/** The example of docs/http.md ("Routes and the configuration file"), as written there. */
export const docsExample = (): string => {
  const doc = readFileSync(new URL("../../docs/http.md", import.meta.url), "utf8")
  const section = doc.slice(doc.indexOf("### Routes and the configuration file"))
  const block = /```json\n([\s\S]*?)\n```/.exec(section)?.[1]
  if (block === undefined) throw new Error("no JSON block in docs/http.md's section on routes")
  return block
}
