/**
 * `npm run build`: the publishable JavaScript of the packages published from
 * this repository — @paddock/contracts and @paddock/sdk, each compiled by tsc
 * into its own dist/ (ESM plus declarations; `pnpm pack` swaps their exports
 * to dist/ through publishConfig) — and the web console's bundle.
 *
 *   node --import tsx scripts/build.ts [--only sdk|console]
 */
import { spawnSync } from "node:child_process";
import { rmSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const bin = (name: string, from = root) => join(from, "node_modules", ".bin", name);

type Step = { name: string; target: Target; run: () => void };
const TARGETS = ["sdk", "console"] as const;
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

const STEPS: Step[] = [
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
    step.run();
  }
} catch (err) {
  process.stderr.write(`[build] ${(err as Error).message}\n`);
  process.exit(1);
}
