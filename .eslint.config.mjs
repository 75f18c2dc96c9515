// ESLint (flat config) with @effect/eslint-plugin's dprint formatting rule, as Effect's own repositories use.
// `npm run lint` checks; `npm run lint -- --fix` formats. (A dotfile: the top level holds only the design
// card's files.)
import * as effectEslint from "@effect/eslint-plugin"
import eslint from "@eslint/js"
import tseslint from "typescript-eslint"

export default tseslint.config(
  // test/.docs-tmp: the docs' code blocks, written out while test/docs.test.ts compiles them.
  { ignores: ["**/dist/**", "**/node_modules/**", "**/*.md", ".tmp/**", "test/.docs-tmp/**"] },
  eslint.configs.recommended,
  tseslint.configs.recommendedTypeChecked,
  {
    // Type-aware rules (a floating or misused promise, an unsafe `any`) read the one program of tsconfig.json.
    languageOptions: { parserOptions: { project: ["./tsconfig.json"], tsconfigRootDir: import.meta.dirname } }
  },
  { files: ["**/*.mjs"], extends: [tseslint.configs.disableTypeChecked] },
  ...effectEslint.configs.dprint,
  {
    files: ["**/*.ts", "**/*.mjs"],
    languageOptions: { ecmaVersion: 2022, sourceType: "module" },
    rules: {
      "@effect/dprint": ["error", {
        config: {
          indentWidth: 2,
          lineWidth: 120,
          semiColons: "asi",
          quoteStyle: "alwaysDouble",
          trailingCommas: "never",
          operatorPosition: "maintain",
          "arrowFunction.useParentheses": "force"
        }
      }],
      // dprint wraps code at 120; comments and prose are wrapped by hand.
      "max-len": ["error", {
        code: 120,
        ignoreStrings: true,
        ignoreTemplateLiterals: true,
        ignoreUrls: true,
        ignoreRegExpLiterals: true
      }],
      "@typescript-eslint/no-explicit-any": "error",
      // It calls needed assertions unnecessary: one that keeps a readonly list from `Array.isArray`'s `any[]`,
      // or a symbol's `unique symbol` type, and its fix then fails to compile.
      "@typescript-eslint/no-unnecessary-type-assertion": "off",
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_", varsIgnorePattern: "^_" }],
      "@typescript-eslint/no-namespace": "off",
      "@typescript-eslint/no-empty-object-type": "off"
    }
  },
  // Tests read JSON (child processes' lines, response bodies, package.json) as `any` and assert on it.
  {
    files: ["test/**/*.ts"],
    rules: {
      "@typescript-eslint/no-unsafe-assignment": "off",
      "@typescript-eslint/no-unsafe-member-access": "off",
      "@typescript-eslint/no-unsafe-argument": "off",
      "@typescript-eslint/no-unsafe-return": "off",
      "@typescript-eslint/no-unsafe-call": "off"
    }
  },
  // Type tests declare values to inspect their types only, and never run: a program they build is not awaited.
  {
    files: ["**/*.test-d.ts"],
    rules: { "@typescript-eslint/no-unused-vars": "off", "@typescript-eslint/no-floating-promises": "off" }
  }
)
