/**
 * `npm run build`: everything that ships as JavaScript.
 *  - services: each service's `main.ts` bundled by esbuild into
 *    `services/<name>/dist/main.js` (and the CLI into `cli/dist/paddock.mjs`),
 *    our code and its npm dependencies in one ES module that plain `node`
 *    starts — no TypeScript loader, no dev dependencies. Only native addons
 *    stay outside (node-pty, which a production install of the runner brings,
 *    patched: `pnpm --filter @paddock/runner-agent deploy --prod`). The
 *    bundle sits where `src/` does, so paths a service resolves from its own
 *    file (the console's dist, the runner's exec init) stay right.
 *  - sdk: @paddock/contracts and @paddock/sdk compiled by tsc into their own
 *    dist/ (ESM plus declarations; `pnpm pack` swaps their exports to dist/
 *    through publishConfig).
 *  - console: the web console's bundle (Vite).
 *
 *   node --import tsx scripts/build.ts [--only services|sdk|console]
 */
import { spawnSync } from "node:child_process";
import { chmodSync, rmSync } from "node:fs";
import { build } from "esbuild";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const bin = (name: string, from = root) => join(from, "node_modules", ".bin", name);

type Step = { name: string; target: Target; run: () => void | Promise<void> };
const TARGETS = ["services", "sdk", "console"] as const;
type Target = (typeof TARGETS)[number];

class BuildError extends Error {
  readonly code = "build_failed";
}

function exec(cmd: string, args: string[], cwd = root): void {
  const r = spawnSync(cmd, args, { stdio: "inherit", cwd });
  if (r.error !== undefined || r.status !== 0) {
    throw new BuildError(`${cmd} ${args.join(" ")} failed (${r.error?.message ?? `exit ${r.status ?? r.signal}`})`, { cause: r.error });
  }
}

/** tsc into dist/, emptied first so a renamed source leaves no stale module behind. */
function tscBuild(pkg: string): () => void {
  return () => {
    rmSync(join(root, pkg, "dist"), { recursive: true, force: true });
    exec(bin("tsc"), ["-p", join(pkg, "tsconfig.build.json")]);
  };
}

/** Native addons (and ws's optional native helpers) cannot be bundled: they resolve from node_modules at run time. */
const NATIVE_EXTERNALS = ["@lydell/node-pty", "bufferutil", "utf-8-validate"];
// Bundled CommonJS dependencies call require(); an ES module has none until it is made.
const REQUIRE_SHIM = 'import { createRequire as __paddockCreateRequire } from "node:module"; const require = __paddockCreateRequire(import.meta.url);';

function bundle(entry: string, outfile: string, shebang = false): () => Promise<void> {
  return async () => {
    // Only this bundle's files: a package's dist/ may hold more than one bundle.
    for (const file of [outfile, `${outfile}.map`]) rmSync(join(root, file), { force: true });
    await build({
      entryPoints: [join(root, entry)],
      outfile: join(root, outfile),
      bundle: true,
      platform: "node",
      format: "esm",
      target: "node20",
      sourcemap: true,
      external: NATIVE_EXTERNALS,
      banner: { js: `${shebang ? "#!/usr/bin/env node\n" : ""}${REQUIRE_SHIM}` },
      logLevel: "warning",
    });
    if (shebang) chmodSync(join(root, outfile), 0o755);
  };
}

const SERVICES = ["scheduler", "runner-agent", "gateway", "event-recorder"] as const;

const STEPS: Step[] = [
  ...SERVICES.map((name): Step => ({ name, target: "services", run: bundle(`services/${name}/src/main.ts`, `services/${name}/dist/main.js`) })),
  { name: "paddock (CLI)", target: "services", run: bundle("cli/src/main.ts", "cli/dist/paddock.mjs", true) },
  { name: "paddock-runner join", target: "services", run: bundle("services/runner-agent/src/join/main.ts", "services/runner-agent/dist/paddock-runner.mjs", true) },
  // Started by the runner as a worker thread beside its bundle (terminal/screen-host.ts).
  { name: "runner-agent screen worker", target: "services", run: bundle("services/runner-agent/src/terminal/screen-worker.ts", "services/runner-agent/dist/screen-worker.js") },
  // Started by the runner as a worker thread on a restore (workspace/fill-worker-host.ts).
  { name: "runner-agent restore worker", target: "services", run: bundle("services/runner-agent/src/workspace/fill-worker.ts", "services/runner-agent/dist/fill-worker.js") },
  { name: "@paddock/contracts", target: "sdk", run: tscBuild("shared/contracts") },
  { name: "@paddock/sdk", target: "sdk", run: tscBuild("sdk") },
  { name: "console", target: "console", run: () => exec(bin("vite", join(root, "console")), ["build", "--logLevel", "error"], join(root, "console")) },
];

function parseOnly(argv: string[]): Target | undefined {
  const i = argv.indexOf("--only");
  if (i < 0) return undefined;
  const value = argv[i + 1];
  if (!TARGETS.includes(value as Target)) {
    process.stderr.write(`build: --only takes one of ${TARGETS.join(", ")}, got ${JSON.stringify(value ?? "")}\n`);
    process.exit(2);
  }
  return value as Target;
}

const only = parseOnly(process.argv.slice(2));
try {
  for (const step of STEPS) {
    if (only !== undefined && step.target !== only) continue;
    process.stderr.write(`[build] ${step.name}\n`);
    await step.run();
  }
} catch (err) {
  process.stderr.write(`[build] ${(err as Error).message}\n`);
  process.exit(1);
}
