// `pnpm run cycles`: fails on any import cycle between our modules. Unlike
// eslint's import-x/no-cycle it counts `import type` too (tsPreCompilationDeps),
// because a type-only cycle is still two modules that cannot be read apart.
// scheduler folders: each folder of services/scheduler/src imports only the
// folders below it, as its README.md says (state/ <- fleet/ <- placement/,
// facts/, api/ <- policies/ <- scheduler.ts), plus the root leaves context.ts,
// metrics.ts and config.ts, which themselves import only state/. Tests may
// reach into what they test, so *.test.ts and testing/ are not bound.
const SCHEDULER = "^services/scheduler/src/";
const SCHEDULER_LEAVES = "(context|metrics|config)\\.ts$";
function schedulerFolder(folder, mayImport) {
  const allowed = [folder, ...mayImport].map((f) => `${f}/`);
  if (folder !== "state") allowed.push(SCHEDULER_LEAVES);
  return {
    name: `scheduler-${folder}`,
    severity: "error",
    comment:
      folder === "state"
        ? "services/scheduler/src/state/ is the leaf: it imports nothing of the scheduler outside itself (see its README.md)."
        : `services/scheduler/src/${folder}/ may import only ${mayImport.map((f) => `${f}/`).join(", ")}, context.ts, metrics.ts and config.ts (see its README.md): move what it needs into a lower folder.`,
    from: { path: `${SCHEDULER}${folder}/`, pathNot: "\\.test\\.ts$" },
    to: { path: SCHEDULER, pathNot: `${SCHEDULER}(${allowed.join("|")})` },
  };
}

export default {
  forbidden: [
    {
      name: "no-circular",
      severity: "error",
      comment: "Break the cycle: move the shared types into a leaf module, or the shared helper into its own module.",
      from: {},
      to: { circular: true },
    },
    // scheduler folders
    schedulerFolder("state", []),
    schedulerFolder("fleet", ["state"]),
    schedulerFolder("placement", ["fleet", "state"]),
    schedulerFolder("facts", ["fleet", "state"]),
    schedulerFolder("api", ["fleet", "state"]),
    schedulerFolder("policies", ["api", "fleet", "state"]),
    {
      name: "scheduler-leaves",
      severity: "error",
      comment: "services/scheduler/src/{context,metrics,config}.ts are imported by every folder, so they import only state/ (and each other).",
      from: { path: `${SCHEDULER}${SCHEDULER_LEAVES}` },
      to: { path: SCHEDULER, pathNot: `${SCHEDULER}(state/|${SCHEDULER_LEAVES})` },
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
