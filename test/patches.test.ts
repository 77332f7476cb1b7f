/**
 * The patches in `patches/` stay honest: each starts with a header saying why,
 * the measurement or reproduced bug, the upstream issue and when to drop it;
 * each patched package is pinned to the exact version its patch is keyed to;
 * and the installed package, resolved the way the code that uses it resolves
 * it, is that version and carries every line the patch adds. An upgrade, a
 * lost `patchedDependencies` entry or an install that skipped a patch fails
 * here instead of silently bringing back the bug or the cost.
 */
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { describe, expect, it } from "vitest";
import { repoRoot } from "@paddock/testing";

/**
 * How each patched package is reached: the workspace package that uses it,
 * then the chain of packages through which it is resolved (nats-core is only a
 * dependency of the @nats-io packages the code imports).
 */
const RESOLUTION: Record<string, { from: string; via: string[] }> = {
  "@lydell/node-pty@1.1.0": { from: "services/runner-agent", via: ["@lydell/node-pty"] },
  "@nats-io/nats-core@3.4.0": { from: "shared/bus", via: ["@nats-io/transport-node", "@nats-io/nats-core"] },
};

const HEADER_FIELDS = [/^Why:/m, /^(Measurement|Reproduced bug):/m, /^Upstream:/m, /^Drop when:/m];

const workspaceYaml = readFileSync(join(repoRoot, "pnpm-workspace.yaml"), "utf8");

/** The `key: value` lines of a top-level block of pnpm-workspace.yaml. */
function yamlBlock(name: string): Map<string, string> {
  const block = new RegExp(`^${name}:\\n((?:[ \\t]+.*\\n?)*)`, "m").exec(workspaceYaml);
  const entries = new Map<string, string>();
  for (const line of block?.[1]?.split("\n") ?? []) {
    const m = /^\s+'?([^':]+(?::[^':]+)?)'?:\s*(.+)$/.exec(line);
    if (m?.[1] !== undefined && m[2] !== undefined) entries.set(m[1].trim(), m[2].trim());
  }
  return entries;
}

function splitKey(key: string): { name: string; version: string } {
  const at = key.lastIndexOf("@");
  return { name: key.slice(0, at), version: key.slice(at + 1) };
}

/** The directory of the package a resolved entry file belongs to. */
function packageDir(entry: string, name: string): string {
  for (let dir = dirname(entry); dir !== dirname(dir); dir = dirname(dir)) {
    const manifest = join(dir, "package.json");
    if (existsSync(manifest) && (JSON.parse(readFileSync(manifest, "utf8")) as { name?: string }).name === name) return dir;
  }
  throw new Error(`no package.json named ${name} above ${entry}`);
}

function installedDir(key: string): string {
  const route = RESOLUTION[key];
  if (route === undefined) throw new Error(`${key}: add how it is resolved to RESOLUTION`);
  let dir = join(repoRoot, route.from);
  for (const name of route.via) {
    dir = packageDir(createRequire(join(dir, "package.json")).resolve(name), name);
  }
  return dir;
}

/** Per file the patch touches, the lines it adds (blank ones left out). */
function addedLines(patch: string): Map<string, string[]> {
  const files = new Map<string, string[]>();
  let current: string[] | undefined;
  for (const line of patch.split("\n")) {
    const target = /^\+\+\+ b\/(.+)$/.exec(line);
    if (target?.[1] !== undefined) {
      current = [];
      files.set(target[1], current);
    } else if (current !== undefined && line.startsWith("+") && line.slice(1).trim() !== "") {
      current.push(line.slice(1));
    }
  }
  return files;
}

/** Every workspace package.json (not those under node_modules). */
function workspaceManifests(): string[] {
  const packages = /^packages:\n((?:[ \t]+-.*\n?)*)/m.exec(workspaceYaml)?.[1] ?? "";
  const globs = [...packages.matchAll(/^\s+-\s+(\S+)$/gm)].map((m) => m[1] ?? "");
  const dirs = globs.flatMap((g) =>
    g.endsWith("/*")
      ? readdirSync(join(repoRoot, g.slice(0, -2)), { withFileTypes: true })
          .filter((d) => d.isDirectory())
          .map((d) => join(g.slice(0, -2), d.name))
      : [g],
  );
  return [".", ...dirs].map((d) => join(repoRoot, d, "package.json")).filter((p) => existsSync(p));
}

type Manifest = Partial<Record<"dependencies" | "devDependencies" | "optionalDependencies", Record<string, string>>>;

const patched = yamlBlock("patchedDependencies");
const overrides = yamlBlock("overrides");
const patchFiles = readdirSync(join(repoRoot, "patches")).filter((f) => f.endsWith(".patch"));

/** `@scope__name@1.2.3.patch` (pnpm's file name) to `@scope/name@1.2.3`. */
function keyOf(file: string): string {
  return file.slice(0, -".patch".length).replace("__", "/");
}

describe("patches", () => {
  it("every file in patches/ is applied by patchedDependencies under its own key", () => {
    expect([...patched.entries()].sort()).toEqual(patchFiles.map((f) => [keyOf(f), `patches/${f}`]).sort());
  });

  for (const file of patchFiles) {
    const key = keyOf(file);
    const path = `patches/${file}`;
    const { name, version } = splitKey(key);
    const patch = readFileSync(join(repoRoot, path), "utf8");

    describe(key, () => {
      it("starts with why, the measurement or bug, the upstream issue and when to drop it", () => {
        const header = patch.slice(0, patch.search(/^diff --git /m));
        for (const field of HEADER_FIELDS) expect(header, `${path}: ${String(field)}`).toMatch(field);
      });

      it("is pinned to exactly the version the patch is keyed to", () => {
        const declared = workspaceManifests().flatMap((p) => {
          const m = JSON.parse(readFileSync(p, "utf8")) as Manifest;
          const spec = m.dependencies?.[name] ?? m.devDependencies?.[name] ?? m.optionalDependencies?.[name];
          return spec === undefined ? [] : [{ p, spec }];
        });
        // A transitive dependency is pinned by an override instead.
        if (declared.length === 0) expect(overrides.get(name)).toBe(version);
        for (const d of declared) expect(d, d.p).toEqual({ p: d.p, spec: version });
      });

      it("is installed at that version with every line the patch adds", () => {
        const dir = installedDir(key);
        const pkg = JSON.parse(readFileSync(join(dir, "package.json"), "utf8")) as { version: string };
        expect(pkg.version).toBe(version);
        const files = addedLines(patch);
        expect(files.size).toBeGreaterThan(0);
        for (const [file, lines] of files) {
          const installed = new Set(readFileSync(join(dir, file), "utf8").split("\n"));
          const missing = lines.filter((l) => !installed.has(l));
          expect(missing, `${name}/${file} lacks lines the patch adds`).toEqual([]);
        }
      });
    });
  }
});
