// Lint gates what review keeps missing: floating promises (an un-awaited
// publish or ack is a bug) and import cycles between modules.
import tseslint from "typescript-eslint";
import importX from "eslint-plugin-import-x";

export default tseslint.config(
  { ignores: ["**/node_modules/**", "**/dist/**", ".tools/**", "bench-results/**", "**/*.mjs", "**/*.js"] },
  {
    files: ["**/*.ts"],
    extends: [tseslint.configs.base],
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    plugins: { "import-x": importX },
    settings: {
      "import-x/resolver-next": [importX.createNodeResolver({ extensions: [".ts", ".js"] })],
      "import-x/extensions": [".ts", ".js"],
      "import-x/parsers": { "@typescript-eslint/parser": [".ts"] },
    },
    rules: {
      "@typescript-eslint/no-floating-promises": "error",
      "@typescript-eslint/no-misused-promises": ["error", { checksVoidReturn: { arguments: false } }],
      "@typescript-eslint/await-thenable": "error",
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_", varsIgnorePattern: "^_" }],
      "@typescript-eslint/consistent-type-imports": "error",
      // Skips `import type`; `pnpm run cycles` (dependency-cruiser) counts those too.
      "import-x/no-cycle": ["error", { maxDepth: 10 }],
      "no-restricted-syntax": ["error", { selector: "TSEnumDeclaration", message: "use an `as const` object" }],
    },
  },
  {
    // One loadConfig(env) per service: only entry points hand process.env to it.
    files: ["services/*/src/**/*.ts", "shared/*/src/**/*.ts", "cli/src/**/*.ts"],
    ignores: ["**/main.ts", "**/*.test.ts", "**/test-support.ts", "**/testkit.ts", "shared/testing/**", "cli/src/testing/**"],
    rules: {
      "no-restricted-properties": ["error", { object: "process", property: "env", message: "read configuration through loadConfig(env) in main.ts" }],
    },
  },
  {
    // The console never turns text into markup: a session's output, names and paths stay text (issue 27).
    files: ["console/src/**/*.ts"],
    rules: {
      "no-restricted-properties": [
        "error",
        { property: "innerHTML", message: "build elements with dom.ts's h(): text is never parsed as HTML" },
        { property: "outerHTML", message: "build elements with dom.ts's h()" },
        { property: "insertAdjacentHTML", message: "build elements with dom.ts's h()" },
        { object: "document", property: "write", message: "build elements with dom.ts's h()" },
      ],
      "no-restricted-globals": ["error", { name: "eval", message: "no eval: the CSP forbids it" }],
    },
  },
);
