// `pnpm run cycles`: fails on any import cycle between our modules. Unlike
// eslint's import-x/no-cycle it counts `import type` too (tsPreCompilationDeps),
// because a type-only cycle is still two modules that cannot be read apart.
export default {
  forbidden: [
    {
      name: "no-circular",
      severity: "error",
      comment: "Break the cycle: move the shared types into a leaf module, or the shared helper into its own module.",
      from: {},
      to: { circular: true },
    },
    // gateway folders (services/gateway/src/*/README.md): http/ is a leaf; auth/ and
    // terminal/ never reach into routes/; nothing but tests imports testing/.
    {
      name: "gateway-http-is-a-leaf",
      severity: "error",
      comment: "gateway http/ (server plumbing, limits, bodies) imports nothing else of the gateway.",
      from: { path: "^services/gateway/src/http/", pathNot: "\\.test\\.ts$" },
      to: { path: "^services/gateway/src/", pathNot: "^services/gateway/src/http/" },
    },
    {
      name: "gateway-no-routes-from-auth-or-terminal",
      severity: "error",
      comment: "gateway auth/ and terminal/ do not depend on route modules: shared pieces go to http/, context.ts or contracts.",
      from: { path: "^services/gateway/src/(auth|terminal)/", pathNot: "\\.test\\.ts$" },
      to: { path: "^services/gateway/src/routes/" },
    },
    {
      name: "gateway-auth-not-terminal",
      severity: "error",
      comment: "gateway auth/ is below terminal/: the terminal uses auth, never the reverse.",
      from: { path: "^services/gateway/src/auth/", pathNot: "\\.test\\.ts$" },
      to: { path: "^services/gateway/src/terminal/" },
    },
    {
      name: "gateway-testing-only-from-tests",
      severity: "error",
      comment: "gateway testing/ (fakes, kits) is for tests only.",
      from: { path: "^services/gateway/src/", pathNot: "(\\.test\\.ts$|^services/gateway/src/testing/)" },
      to: { path: "^services/gateway/src/testing/" },
    },
  ],
  options: {
    tsPreCompilationDeps: true,
    tsConfig: { fileName: "tsconfig.json" },
    doNotFollow: { path: "node_modules" },
    // Workspace packages (`@paddock/*`) resolve through their package.json
    // `exports` to `src/`, so a cycle between packages counts too.
    enhancedResolveOptions: { exportsFields: ["exports"], conditionNames: ["import", "require", "node", "default"] },
    // What git ignores: installs, tools, results, and `.data/` (runner
    // workspaces of `npm run up`, which hold whatever a session wrote).
    exclude: { path: "(^|/)(node_modules|\\.tools|\\.data|bench-results|dist)/" },
  },
};
