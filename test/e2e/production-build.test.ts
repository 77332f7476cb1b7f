/**
 * The production build (issue 29 item 1): `npm run build` bundles each
 * service and the CLI into plain JavaScript. Here every service of a stack
 * runs its bundle with `node` alone (no TypeScript loader on its command
 * line), the runner from a production deploy of it (`pnpm deploy --prod`:
 * production dependencies only, node-pty patched as in development), and the
 * built CLI drives it: a session's terminal output comes through the
 * deployed node-pty, exec answers, and bad usage fails as the CLI's own.
 */
import { spawnSync } from "node:child_process";
import { cpSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect } from "@nats-io/transport-node";
import { jetstream } from "@nats-io/jetstream";
import { ScreenCheckpoint, Streams } from "@paddock/contracts";
import { repoRoot, startStack, type ServiceProcess, type Stack } from "@paddock/testing";
import { stackClient } from "./helpers.ts";

const pnpm = join(repoRoot, ".tools", "pnpm", "node_modules", ".bin", "pnpm");
const cliBundle = join(repoRoot, "cli", "dist", "paddock.mjs");
let stack: Stack;
let runner: ServiceProcess;
let deployDir = "";

function run(cmd: string, args: string[], opts: { cwd?: string; env?: NodeJS.ProcessEnv } = {}) {
  const r = spawnSync(cmd, args, { cwd: opts.cwd ?? repoRoot, env: opts.env ?? process.env, encoding: "utf8" });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

function mustRun(cmd: string, args: string[], cwd = repoRoot): void {
  const r = run(cmd, args, { cwd });
  if (r.code !== 0) throw new Error(`${cmd} ${args.join(" ")} exited ${String(r.code)}:\n${r.stdout}\n${r.stderr}`);
}

/** A production install of the runner: its package with production dependencies only, plus its bundle. */
function deployRunner(): string {
  const dir = join(mkdtempSync(join(tmpdir(), "paddock-deploy-")), "runner-agent");
  mustRun(pnpm, ["--filter", "@paddock/runner-agent", "deploy", "--prod", "--legacy", dir]);
  cpSync(join(repoRoot, "services", "runner-agent", "dist"), join(dir, "dist"), { recursive: true });
  cpSync(join(repoRoot, "services", "runner-agent", "native", "paddock-init"), join(dir, "native", "paddock-init"));
  cpSync(join(repoRoot, "services", "runner-agent", "native", "fs-exchange.node"), join(dir, "native", "fs-exchange.node"));
  return dir;
}

/** The first screen checkpoint of a session's main app (written once its output is quiet). */
async function firstScreenCheckpoint(sessionId: string): Promise<ScreenCheckpoint> {
  const nc = await connect({ servers: stack.nats.url });
  try {
    const consumer = await jetstream(nc).consumers.get(Streams.screens, { filter_subjects: [`paddock.screen.*.*.${sessionId}.main`] });
    const messages = await consumer.consume();
    let first: ScreenCheckpoint | undefined;
    for await (const m of messages) {
      first = ScreenCheckpoint.parse(m.json());
      break;
    }
    await messages.close();
    if (!first) throw new Error("no screen checkpoint");
    return first;
  } finally {
    await nc.close();
  }
}

const cmdline = (pid: number | undefined) => readFileSync(`/proc/${String(pid)}/cmdline`, "utf8").split("\0").filter((a) => a !== "");

beforeAll(async () => {
  mustRun(process.execPath, ["--import", "tsx", "scripts/build.ts", "--only", "services"]);
  deployDir = deployRunner();
  stack = await startStack({ built: true, runners: 0 });
  // Every restore through the restore workers (a runner sends only large ones there), so the bundled one is exercised.
  runner = await stack.addRunner({ entry: join(deployDir, "dist", "main.js"), env: { PADDOCK_RUNNER_RESTORE_WORKERS_MIN_CHUNKS: "0" } });
}, 180_000);

afterAll(async () => {
  await stack?.stop();
  if (deployDir !== "") rmSync(join(deployDir, ".."), { recursive: true, force: true });
});

describe("the production build", () => {
  it("runs every service from its bundle with plain node", () => {
    for (const svc of [stack.scheduler, stack.recorder, stack.gateway, runner]) {
      const argv = cmdline(svc.process.pid);
      expect(argv.slice(1).some((a) => a.includes("tsx") || a === "--import")).toBe(false);
      expect(argv.at(-1)).toMatch(/\/dist\/main\.js$/);
    }
    expect(cmdline(runner.process.pid).at(-1)).toBe(join(deployDir, "dist", "main.js"));
  });

  it("deploys the runner with production dependencies only", () => {
    const installed = readdirSync(join(deployDir, "node_modules", ".pnpm"));
    expect(installed.some((p) => p.startsWith("@lydell+node-pty@1.1.0_patch_hash="))).toBe(true);
    for (const dev of ["tsx@", "typescript@", "vitest@", "esbuild@"]) expect(installed.filter((p) => p.startsWith(dev))).toEqual([]);
    expect(existsSync(join(deployDir, "node_modules", "tsx"))).toBe(false);
  });

  it("serves a session end to end: its terminal through the deployed node-pty, exec and usage errors through the built CLI", async () => {
    const cli = { ...process.env, PADDOCK_URL: stack.url, PADDOCK_TOKEN: stack.token };
    const created = run(process.execPath, [cliBundle, "create", "--", "sh", "-c", "echo BUILT-$((6*7)); exec sleep 600"], { env: cli });
    expect(created.code, created.stderr).toBe(0);
    const id = /ses_[A-Za-z0-9]+/.exec(created.stdout)?.[0] ?? "";
    expect(id).not.toBe("");
    const { outputOf } = stackClient(() => stack);
    expect(await outputOf(id, (t) => t.includes("BUILT-42"))).toContain("BUILT-42");
    // The PTY the session's app runs on came from the deploy's node-pty, not the repository's.
    const maps = readFileSync(`/proc/${String(runner.process.pid)}/maps`, "utf8");
    expect(maps).toContain(join(deployDir, "node_modules", ".pnpm"));
    // Its screen checkpoint comes from the runner's screen worker, started from the deploy's bundle (dist/screen-worker.js).
    expect(existsSync(join(deployDir, "dist", "screen-worker.js"))).toBe(true);
    expect((await firstScreenCheckpoint(id)).screen).toContain("BUILT-42");
    const exec = run(process.execPath, [cliBundle, "exec", id, "--", "sh", "-c", "echo out; echo err >&2; exit 5"], { env: cli });
    expect(exec).toEqual({ code: 5, stdout: "out\n", stderr: "err\n" });
    const usage = run(process.execPath, [cliBundle, "exec", id, "--timeout-ms", "soon", "--", "true"], { env: cli });
    expect(usage.code).toBe(2);
    expect(usage.stderr).toMatch(/timeout-ms/);
  });

  it("restores a cold-suspended workspace through the built runner (its chunks fetched and written by the restore worker)", async () => {
    const cli = { ...process.env, PADDOCK_URL: stack.url, PADDOCK_TOKEN: stack.token };
    const created = run(process.execPath, [cliBundle, "create", "--", "sleep", "600"], { env: cli });
    const id = /ses_[A-Za-z0-9]+/.exec(created.stdout)?.[0] ?? "";
    const call = async (path: string, body?: unknown) => {
      const headers = { authorization: `Bearer ${stack.token}`, "content-type": "application/json" };
      const res = await fetch(`${stack.url}${path}`, body === undefined ? { headers } : { method: "POST", headers, body: JSON.stringify(body) });
      return (await res.json()) as { state: string };
    };
    expect((await call(`/v1/sessions/${id}?waitFor=running&timeoutMs=60000`)).state).toBe("running");
    // Past 1 MiB: a whole chunk and a part of one, written by the restore worker started from the deploy's bundle (dist/fill-worker.js).
    expect(existsSync(join(deployDir, "dist", "fill-worker.js"))).toBe(true);
    const made = run(process.execPath, [cliBundle, "exec", id, "--", "sh", "-c", "head -c 1500000 /dev/urandom > big && sha256sum big"], { env: cli });
    expect(made.code, made.stderr).toBe(0);
    expect((await call(`/v1/sessions/${id}/suspend?wait=suspended_cold&timeoutMs=60000`, { warm: false })).state).toBe("suspended_cold");
    expect((await call(`/v1/sessions/${id}/resume?wait=running&timeoutMs=60000`, {})).state).toBe("running");
    const again = run(process.execPath, [cliBundle, "exec", id, "--", "sha256sum", "big"], { env: cli });
    expect(again).toEqual({ code: 0, stdout: made.stdout, stderr: "" });
  });

  it("replaces a written file through the deployed file-exchange addon", async () => {
    const cli = { ...process.env, PADDOCK_URL: stack.url, PADDOCK_TOKEN: stack.token };
    const id = /ses_[A-Za-z0-9]+/.exec(run(process.execPath, [cliBundle, "create", "--", "sleep", "600"], { env: cli }).stdout)?.[0] ?? "";
    const headers = { authorization: `Bearer ${stack.token}` };
    expect((await (await fetch(`${stack.url}/v1/sessions/${id}?waitFor=running&timeoutMs=60000`, { headers })).json()) as { state: string }).toMatchObject({ state: "running" });
    const url = `${stack.url}/v1/sessions/${id}/files?path=f.bin`;
    for (const fill of [1, 2]) expect((await fetch(url, { method: "PUT", headers, body: Buffer.alloc(200_000, fill) })).status).toBe(200);
    expect(Buffer.from(await (await fetch(url, { headers })).arrayBuffer()).equals(Buffer.alloc(200_000, 2))).toBe(true);
    // Loaded from the deploy (native/fs-exchange.node beside dist/), not the rename it falls back to.
    expect(readFileSync(`/proc/${String(runner.process.pid)}/maps`, "utf8")).toContain(join(deployDir, "native", "fs-exchange.node"));
    expect(runner.output()).not.toContain("file-exchange addon not loaded");
  });
});
