/**
 * @paddock/sdk as a user installs it: `npm run build` compiles it and
 * @paddock/contracts to JavaScript, `pnpm pack` makes the two tarballs that
 * would be published, and a project outside the repository installs them
 * (nothing of the workspace on its path). There, plain Node (no TypeScript
 * loader) drives a real stack through the package; tsc type-checks a
 * consumer against the shipped declarations with no Node types (a browser or
 * edge project); and esbuild bundles it for the browser, which fails on any
 * Node built-in the SDK's code would pull in.
 */
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { build } from "esbuild";
import { startStack, type Stack } from "@paddock/testing";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const pnpm = join(root, ".tools", "pnpm", "node_modules", ".bin", "pnpm");
let stack: Stack;
let consumer = "";

function run(cmd: string, args: string[], cwd: string, env: NodeJS.ProcessEnv = process.env): string {
  const r = spawnSync(cmd, args, { cwd, env, encoding: "utf8" });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(" ")} exited ${r.status ?? r.signal}:\n${r.stdout}\n${r.stderr}`);
  return r.stdout;
}

/** Builds, packs and installs the two packages into a fresh project; returns its directory. */
function installPacked(): string {
  run(process.execPath, ["--import", "tsx", "scripts/build.ts", "--only", "sdk"], root);
  const dir = mkdtempSync(join(tmpdir(), "paddock-sdk-consumer-"));
  const packs = join(dir, "packs");
  run(pnpm, ["pack", "--pack-destination", packs], join(root, "shared", "contracts"));
  run(pnpm, ["pack", "--pack-destination", packs], join(root, "sdk"));
  const version = (JSON.parse(readFileSync(join(root, "sdk", "package.json"), "utf8")) as { version: string }).version;
  const contracts = join(packs, `paddock-contracts-${version}.tgz`);
  // The contracts are not on a registry yet: the override points the SDK's dependency at their tarball.
  const manifest = { name: "consumer", private: true, type: "module", pnpm: { overrides: { "@paddock/contracts": `file:${contracts}` } } };
  writeFileSync(join(dir, "package.json"), JSON.stringify(manifest));
  run(pnpm, ["add", join(packs, `paddock-sdk-${version}.tgz`), "--prefer-offline", "--ignore-workspace"], dir);
  return dir;
}

beforeAll(async () => {
  consumer = installPacked();
  stack = await startStack();
}, 180_000);
afterAll(async () => {
  await stack?.stop();
  if (consumer !== "") rmSync(consumer, { recursive: true, force: true });
});

const CONSUMER_SCRIPT = `
import { Paddock, NotFound } from "@paddock/sdk";
const pd = new Paddock({ baseUrl: process.env.PADDOCK_URL, token: process.env.PADDOCK_TOKEN });
const s = await pd.sessions.create({ spec: { cmd: ["sh", "-c", "exec sleep 600"] } }, { wait: "running", timeoutMs: 30000 });
const r = await pd.exec.run(s.id, { cmd: ["sh", "-c", "echo packed; exit 4"] });
const missing = await pd.sessions.get("ses_nosuchsession").catch((e) => e);
await pd.sessions.delete(s.id);
console.log(JSON.stringify({ exitCode: r.exitCode, stdout: r.stdout, notFound: missing instanceof NotFound, code: missing.code }));
`;

const CONSUMER_TYPES = `
import { Paddock, type PaddockOptions } from "@paddock/sdk";
const options: PaddockOptions = { baseUrl: "http://127.0.0.1:1", token: "t" };
export async function main(): Promise<number | null> {
  const pd = new Paddock(options);
  const r = await pd.exec.run("ses_x", { cmd: ["true"] });
  // @ts-expect-error exitCode is a number or null, never a string: the declarations carry the contract's types.
  const wrong: string = r.exitCode;
  void wrong;
  return r.exitCode;
}
`;

describe("@paddock/sdk as published", () => {
  it("installs from its tarball and drives a real stack from plain Node", () => {
    writeFileSync(join(consumer, "main.mjs"), CONSUMER_SCRIPT);
    const out = run(process.execPath, ["main.mjs"], consumer, { ...process.env, PADDOCK_URL: stack.url, PADDOCK_TOKEN: stack.token });
    expect(JSON.parse(out.trim())).toEqual({ exitCode: 4, stdout: "packed\n", notFound: true, code: "not_found" });
  });

  it("type-checks a consumer against its declarations with no Node types", () => {
    writeFileSync(join(consumer, "main.ts"), CONSUMER_TYPES);
    const tsconfig = { compilerOptions: { strict: true, noEmit: true, target: "ES2022", module: "ESNext", moduleResolution: "Bundler", lib: ["ES2023", "DOM", "DOM.Iterable"], types: [] }, files: ["main.ts"] };
    writeFileSync(join(consumer, "tsconfig.json"), JSON.stringify(tsconfig));
    const r = spawnSync(join(root, "node_modules", ".bin", "tsc"), ["-p", "tsconfig.json"], { cwd: consumer, encoding: "utf8" });
    expect(r.stdout + r.stderr).toBe("");
    expect(r.status).toBe(0);
  });

  it("bundles for the browser with no Node built-ins", async () => {
    writeFileSync(join(consumer, "browser.mjs"), `import { Paddock } from "@paddock/sdk";\nglobalThis.pd = new Paddock({ baseUrl: location.origin, token: "t" });\n`);
    const result = await build({ entryPoints: [join(consumer, "browser.mjs")], bundle: true, platform: "browser", format: "esm", write: false, logLevel: "silent", absWorkingDir: consumer });
    expect(result.errors).toEqual([]);
    const code = result.outputFiles[0]?.text ?? "";
    expect(code).toMatch(/class Paddock\b|\bPaddock = class\b/);
    expect(code).not.toMatch(/from\s*"node:|require\("node:/);
  });
});
