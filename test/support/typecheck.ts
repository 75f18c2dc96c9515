/**
 * One TypeScript program, in a process of its own (test/docs.test.ts starts it): the root files named on
 * the command line's JSON file, under tsconfig.json's options with `paths` made absolute. Prints every
 * diagnostic as one JSON array on stdout: its file (absolute, or "" for none), 0-based line and character,
 * code and flattened message. A program of the whole project takes tens of seconds of one core: run here,
 * it blocks no test worker.
 *
 * ESLint then runs over the project (.eslint.config.mjs, as `npm run lint`), its type-aware
 * rules reading this same program (typescript-eslint's `programs`), not a second one of their own: one
 * program of the whole project serves the compile and the lint (docs.test.ts asserts on both).
 *
 * argv: a JSON file holding `{ "roots": string[], "root": string }`
 */
import { ESLint } from "eslint"
import { readFileSync } from "node:fs"
import { join, relative, resolve } from "node:path"
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
/** Each problem ESLint reports: `file:line:column rule message`, the file relative to the root. */
const lint = async (): Promise<Array<string>> => {
  const eslint = new ESLint({
    cwd: root,
    overrideConfigFile: join(root, ".eslint.config.mjs"),
    // The TypeScript files, which the program holds; the config's .mjs files are linted without types.
    overrideConfig: { files: ["**/*.ts"], languageOptions: { parserOptions: { programs: [program] } } }
  })
  const results = await eslint.lintFiles(["."])
  return results.flatMap((result) =>
    result.messages.map((m) =>
      `${relative(root, result.filePath)}:${m.line}:${m.column} ${m.ruleId ?? "(parser)"} ${m.message}`
    )
  )
}

process.stdout.write(
  JSON.stringify({ fileNames: parsed.fileNames, diagnostics, lint: await lint() })
)
