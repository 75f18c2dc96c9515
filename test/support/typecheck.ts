/**
 * One TypeScript program, in a process of its own (test/docs.test.ts starts it): the root files named on
 * the command line's JSON file, under tsconfig.json's options with `paths` made absolute. Prints every
 * diagnostic as one JSON array on stdout: its file (absolute, or "" for none), 0-based line and character,
 * code and flattened message. A program of the whole project takes tens of seconds of one core: run here,
 * it blocks no test worker.
 *
 * argv: a JSON file holding `{ "roots": string[], "root": string }`
 */
import { readFileSync } from "node:fs"
import { join, resolve } from "node:path"
import ts from "typescript"

const { root, roots } = JSON.parse(readFileSync(process.argv[2]!, "utf8")) as {
  readonly root: string
  readonly roots: ReadonlyArray<string>
}
const configPath = join(root, "tsconfig.json")
const config = ts.readConfigFile(configPath, (path) => ts.sys.readFile(path))
if (config.error !== undefined) throw new Error(ts.flattenDiagnosticMessageText(config.error.messageText, "\n"))
const parsed = ts.parseJsonConfigFileContent(config.config, ts.sys, root, undefined, configPath)
// `paths` without a baseUrl are relative to tsconfig.json: made absolute, they hold from any folder.
const paths = Object.fromEntries(
  Object.entries(parsed.options.paths ?? {}).map((
    [pattern, targets]
  ) => [pattern, targets.map((t) => resolve(root, t))])
)
const program = ts.createProgram({
  rootNames: [...parsed.fileNames, ...roots],
  options: { ...parsed.options, paths, noEmit: true }
})
const diagnostics = ts.getPreEmitDiagnostics(program).map((diagnostic) => {
  const { file, start } = diagnostic
  const position = file === undefined || start === undefined ? undefined : file.getLineAndCharacterOfPosition(start)
  return {
    file: file === undefined ? "" : resolve(file.fileName),
    line: position?.line ?? 0,
    character: position?.character ?? 0,
    code: diagnostic.code,
    message: ts.flattenDiagnosticMessageText(diagnostic.messageText, "\n")
  }
})
process.stdout.write(JSON.stringify({ fileNames: parsed.fileNames, diagnostics }))
