// `pnpm run cycles`: fails on any import cycle between our modules, and on
// any import a folder rule below forbids. Unlike eslint's import-x/no-cycle it
// counts `import type` too (tsPreCompilationDeps), because a type-only cycle
// (or a type-only import across a folder boundary) is still a dependency.

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
    {
      name: "no-testing-in-production",
      severity: "error",
      comment: "Test fakes and kits live in a src/testing/ folder; production code never imports one (only tests, other kits, and test/, bench/, chaos/ do).",
      from: { pathNot: ["\\.test\\.ts$", "(^|/)testing/", "^(test|bench|chaos)/"] },
      to: { path: "(^|/)src/testing/" },
    },
    // runner-agent folders: what each folder's README.md says it may import.
    // Production files only: a test may drive the whole agent (src/testing/).
    // The root's agent.ts (composition), config.ts, service.ts and index.ts
    // may import any folder; errors.ts and metrics.ts are leaves every folder
    // may import.
    {
      name: "runner-agent-root-leaves",
      severity: "error",
      comment: "errors.ts and metrics.ts are the leaves every folder imports: they import nothing of the agent.",
      from: { path: "^services/runner-agent/src/(errors|metrics)\\.ts$" },
      to: { path: "^services/runner-agent/src/" },
    },
    {
      name: "runner-agent-join",
      severity: "error",
      comment: "runner-agent join/ (paddock-runner join, run once on a host) imports nothing of the agent.",
      from: { path: "^services/runner-agent/src/join/", pathNot: "\\.test\\.ts$" },
      to: { path: "^services/runner-agent/src/", pathNot: "^services/runner-agent/src/join/" },
    },
    {
      name: "runner-agent-fleet",
      severity: "error",
      comment: "fleet/ (registration, lease, dispatch, held check, facts) imports no sibling folder: see fleet/README.md.",
      from: { path: "^services/runner-agent/src/fleet/", pathNot: "\\.test\\.ts$" },
      to: { path: "^services/runner-agent/src/", pathNot: "^services/runner-agent/src/(fleet/|errors\\.ts$|metrics\\.ts$)" },
    },
    {
      name: "runner-agent-sandbox",
      severity: "error",
      comment: "sandbox/ (the backend seam and its backends) is the bottom layer: it imports no sibling folder. See sandbox/README.md.",
      from: { path: "^services/runner-agent/src/sandbox/", pathNot: "\\.test\\.ts$" },
      to: { path: "^services/runner-agent/src/", pathNot: "^services/runner-agent/src/(sandbox/|errors\\.ts$|metrics\\.ts$)" },
    },
    {
      name: "runner-agent-sandbox-seam",
      severity: "error",
      comment: "The seam (sandbox/*.ts) knows no backend: backends (sandbox/process/, sandbox/bwrap/) build on it, not the other way.",
      from: { path: "^services/runner-agent/src/sandbox/[^/]+$", pathNot: "\\.test\\.ts$" },
      to: { path: "^services/runner-agent/src/sandbox/[^/]+/" },
    },
    {
      name: "runner-agent-sandbox-backends",
      severity: "error",
      comment: "A sandbox backend imports no other backend; what two share belongs in the seam (sandbox/*.ts).",
      from: { path: "^services/runner-agent/src/sandbox/([^/]+)/", pathNot: "\\.test\\.ts$" },
      to: { path: "^services/runner-agent/src/sandbox/[^/]+/", pathNot: "^services/runner-agent/src/sandbox/$1/" },
    },
    {
      name: "runner-agent-terminal",
      severity: "error",
      comment: "terminal/ imports only the sandbox's seam (sandbox/*.ts, not a backend): see terminal/README.md.",
      from: { path: "^services/runner-agent/src/terminal/", pathNot: "\\.test\\.ts$" },
      to: { path: "^services/runner-agent/src/", pathNot: "^services/runner-agent/src/(terminal/|sandbox/[^/]+$|errors\\.ts$|metrics\\.ts$)" },
    },
    {
      name: "runner-agent-workspace",
      severity: "error",
      comment: "workspace/ imports only the sandbox's seam (sandbox/*.ts, not a backend): see workspace/README.md.",
      from: { path: "^services/runner-agent/src/workspace/", pathNot: "\\.test\\.ts$" },
      to: { path: "^services/runner-agent/src/", pathNot: "^services/runner-agent/src/(workspace/|sandbox/[^/]+$|errors\\.ts$|metrics\\.ts$)" },
    },
    {
      name: "runner-agent-exec",
      severity: "error",
      comment: "exec/ imports only the sandbox's seam (sandbox/*.ts, not a backend): see exec/README.md.",
      from: { path: "^services/runner-agent/src/exec/", pathNot: "\\.test\\.ts$" },
      to: { path: "^services/runner-agent/src/", pathNot: "^services/runner-agent/src/(exec/|sandbox/[^/]+$|errors\\.ts$|metrics\\.ts$)" },
    },
    {
      name: "runner-agent-agents",
      severity: "error",
      comment: "agents/ imports only the sandbox's seam (sandbox/*.ts, not a backend): see agents/README.md.",
      from: { path: "^services/runner-agent/src/agents/", pathNot: "\\.test\\.ts$" },
      to: { path: "^services/runner-agent/src/", pathNot: "^services/runner-agent/src/(agents/|sandbox/[^/]+$|errors\\.ts$|metrics\\.ts$)" },
    },
    {
      name: "runner-agent-sessions",
      severity: "error",
      comment:
        "sessions/ composes fleet/, the sandbox's seam (sandbox/*.ts, never a backend: agent.ts picks one), terminal/, workspace/ and exec/, and nothing at the root but the leaves: see sessions/README.md.",
      from: { path: "^services/runner-agent/src/sessions/", pathNot: "\\.test\\.ts$" },
      to: { path: "^services/runner-agent/src/", pathNot: "^services/runner-agent/src/((sessions|fleet|terminal|workspace|exec)/|sandbox/[^/]+$|errors\\.ts$|metrics\\.ts$)" },
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
    // gateway folders (services/gateway/src/*/README.md): http/ is a leaf; auth/ and
    // terminal/ never reach into routes/; testing/ is no-testing-in-production's.
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
