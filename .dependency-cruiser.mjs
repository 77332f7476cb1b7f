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
