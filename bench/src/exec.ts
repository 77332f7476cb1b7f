/**
 * Exec and repositories (issue 24's performance goals), through the gateway
 * and a runner on its default backend, each beside a baseline measured in
 * the same run: an exec of `true` beside a bare local spawn of it; an exec
 * streaming N MB of stdout beside the terminal output path (a piped app's
 * log read live over the terminal WebSocket, bracketed before and after);
 * and a session's clone of an M MB repository from git http-backend on
 * loopback beside `git clone` of it run directly.
 */
import { execFile, execFileSync, spawn } from "node:child_process";
import { promisify } from "node:util";
import { randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connect } from "@nats-io/transport-node";
import { Paddock } from "@paddock/sdk";
import { makeSourceRepo, startGitHttpServer, startStack, type Stack } from "@paddock/testing";
import { stopStackKeepingData } from "./leftovers.ts";
import { figure, percentile, type Figure } from "./stats.ts";
import { drain, openWs, post, runningWatch, type RunningWatch } from "./terminal.ts";

const MiB = 1024 * 1024;
const execFileAsync = promisify(execFile);

export async function execBench(opts: { samples: number; megabytes: number; repoMegabytes: number }): Promise<Figure[]> {
  const stack = await startStack({ validateOutgoing: false });
  const nc = await connect({ servers: stack.nats.url });
  const watch = await runningWatch(nc);
  try {
    const s = await post(stack, "/v1/sessions", { spec: { cmd: ["sleep", "3600"] } });
    await watch.untilRunning(s.id);
    return [
      ...(await roundTrips(stack, s.id, opts.samples)),
      ...(await sdkRoundTrips(stack, s.id, opts.samples)),
      ...(await streaming(stack, watch, s.id, opts.megabytes)),
      ...(await cloning(stack, opts.repoMegabytes)),
    ];
  } finally {
    watch.stop();
    await nc.drain();
    await stopStackKeepingData(stack);
  }
}

function execCall(stack: Stack, sessionId: string, body: unknown, ndjson = false): Promise<Response> {
  return fetch(`${stack.url}/v1/sessions/${sessionId}/exec`, {
    method: "POST",
    headers: { authorization: `Bearer ${stack.token}`, "content-type": "application/json", ...(ndjson ? { accept: "application/x-ndjson" } : {}) },
    body: JSON.stringify(body),
  });
}

async function roundTrips(stack: Stack, sessionId: string, samples: number): Promise<Figure[]> {
  const execMs: number[] = [];
  for (let i = 0; i < samples + 2; i++) {
    const t0 = performance.now();
    const res = await execCall(stack, sessionId, { cmd: ["true"] });
    const body = (await res.json()) as { exitCode?: number };
    if (res.status !== 200 || body.exitCode !== 0) throw new Error(`exec true answered ${res.status} ${JSON.stringify(body)}`);
    // The first two warm the path (connections, the consumer API), as a client's first calls would.
    if (i >= 2) execMs.push(performance.now() - t0);
  }
  const spawnMs: number[] = [];
  for (let i = 0; i < samples; i++) {
    const t0 = performance.now();
    await new Promise((resolve, reject) => spawn("true", [], { stdio: "ignore" }).once("exit", resolve).once("error", reject));
    spawnMs.push(performance.now() - t0);
  }
  const bench = "exec";
  return [
    figure({ bench, metric: "exec `true` round trip p50", value: percentile(execMs, 50), unit: "ms", baseline: { name: "local spawn p50", value: percentile(spawnMs, 50) }, goal: "≤ 5 ms", met: percentile(execMs, 50) <= 5 }),
    figure({ bench, metric: "exec `true` round trip p99", value: percentile(execMs, 99), unit: "ms", baseline: { name: "local spawn p99", value: percentile(spawnMs, 99) }, goal: "≤ 20 ms", met: percentile(execMs, 99) <= 20 }),
  ];
}

/** The SDK's exec (`pd.exec.run`) beside a raw fetch of the same route, alternated so the VM's drift falls on both. */
async function sdkRoundTrips(stack: Stack, sessionId: string, samples: number): Promise<Figure[]> {
  const pd = new Paddock({ baseUrl: stack.url, token: stack.token });
  const sdkMs: number[] = [];
  const rawMs: number[] = [];
  for (let i = 0; i < samples + 2; i++) {
    let t0 = performance.now();
    const res = await execCall(stack, sessionId, { cmd: ["true"] });
    if ((await res.json() as { exitCode?: number }).exitCode !== 0) throw new Error("raw exec failed");
    const raw = performance.now() - t0;
    t0 = performance.now();
    if ((await pd.exec.run(sessionId, { cmd: ["true"] })).exitCode !== 0) throw new Error("sdk exec failed");
    const sdk = performance.now() - t0;
    if (i >= 2) {
      rawMs.push(raw);
      sdkMs.push(sdk);
    }
  }
  const p50 = percentile(sdkMs, 50);
  const raw50 = percentile(rawMs, 50);
  return [figure({ bench: "exec", metric: "SDK exec `true` round trip p50", value: p50, unit: "ms", baseline: { name: "raw fetch of the route p50", value: raw50 }, goal: "≤ 1.1x raw fetch", met: p50 <= 1.1 * raw50 })];
}

/** N MB of stdout as an exec's NDJSON stream (bytes of the frames' text: the output is ASCII). */
async function execStreamMBs(stack: Stack, sessionId: string, cmd: string[]): Promise<number> {
  const t0 = performance.now();
  const res = await execCall(stack, sessionId, { cmd }, true);
  let bytes = 0;
  // As a careful client reads NDJSON: each piece searched once for line ends, a line's pieces joined once.
  let pending: Buffer[] = [];
  for await (const piece of res.body as unknown as AsyncIterable<Uint8Array>) {
    const chunk = Buffer.from(piece.buffer, piece.byteOffset, piece.byteLength);
    let start = 0;
    for (let end = chunk.indexOf(10); end >= 0; end = chunk.indexOf(10, start)) {
      const line = pending.length > 0 ? Buffer.concat([...pending, chunk.subarray(start, end)]) : chunk.subarray(start, end);
      pending = [];
      start = end + 1;
      const frame = JSON.parse(line.toString("utf8")) as { stdout?: string };
      bytes += frame.stdout?.length ?? 0;
    }
    if (start < chunk.length) pending.push(chunk.subarray(start));
  }
  return bytes / 1e6 / ((performance.now() - t0) / 1000);
}

/** The terminal output path: a piped app printing the same bytes, read live over the terminal WebSocket. */
async function terminalMBs(stack: Stack, watch: RunningWatch, cmd: string[]): Promise<number> {
  const s = await post(stack, "/v1/sessions", { spec: { apps: [{ name: "main", cmd, tty: false }] } });
  const ws = await openWs(`${stack.url.replace("http", "ws")}/v1/sessions/${s.id}/terminal?since=all`, { authorization: `Bearer ${stack.token}` });
  const live = await drain(ws, true);
  await watch.untilRunning(s.id).catch(() => undefined);
  return live.bytes / 1e6 / live.seconds;
}

async function streaming(stack: Stack, watch: RunningWatch, sessionId: string, megabytes: number): Promise<Figure[]> {
  const cmd = ["sh", "-c", `head -c ${megabytes * MiB} /dev/zero | tr '\\0' 'x'`];
  // Bracketed: this VM's speed drifts within a minute; the mean of before and after cancels a steady drift.
  const before = await terminalMBs(stack, watch, cmd);
  const execMBs = await execStreamMBs(stack, sessionId, cmd);
  const after = await terminalMBs(stack, watch, cmd);
  const terminal = (before + after) / 2;
  return [
    figure({ bench: "exec", metric: `stream ${megabytes} MB of stdout (NDJSON)`, value: execMBs, unit: "MB/s", baseline: { name: "terminal output path (mean of before and after)", value: terminal }, goal: "≥ 0.8x terminal", met: execMBs >= 0.8 * terminal }),
  ];
}

/** A repository of about `megabytes` of incompressible content in one commit, served by git http-backend on loopback. */
async function cloning(stack: Stack, megabytes: number): Promise<Figure[]> {
  const src = makeSourceRepo("big");
  const dir = join(src.root, "big.git");
  for (let i = 0; i < megabytes; i++) writeFileSync(join(dir, `blob-${i}.bin`), randomBytes(MiB));
  execFileSync("git", ["-C", dir, "add", "."]);
  execFileSync("git", ["-C", dir, "-c", "user.name=bench", "-c", "user.email=bench@example.com", "commit", "-q", "-m", "big"]);
  execFileSync("chmod", ["-R", "a+rX", src.root]);
  const git = await startGitHttpServer(src.root);
  const url = `${git.url}/big.git`;
  const scratch = mkdtempSync(join(tmpdir(), "paddock-bench-clone-"));
  try {
    const createMs = async (repos: boolean): Promise<number> => {
      const t0 = performance.now();
      const res = await fetch(`${stack.url}/v1/sessions?wait=running&timeoutMs=300000`, {
        method: "POST",
        headers: { authorization: `Bearer ${stack.token}`, "content-type": "application/json" },
        body: JSON.stringify({ spec: { cmd: ["sleep", "3600"], egressAllow: ["127.0.0.1"], ...(repos ? { repos: [{ url }] } : {}) } }),
      });
      const body = (await res.json()) as { id: string; waited?: { outcome: string } };
      if (body.waited?.outcome !== "reached") throw new Error(`a session with${repos ? "" : "out"} repos did not run: ${JSON.stringify(body).slice(0, 300)}`);
      const ms = performance.now() - t0;
      await fetch(`${stack.url}/v1/sessions/${body.id}`, { method: "DELETE", headers: { authorization: `Bearer ${stack.token}` } });
      return ms;
    };
    const clones: number[] = [];
    const plain: number[] = [];
    const direct: number[] = [];
    for (let i = 0; i < 3; i++) {
      plain.push(await createMs(false));
      clones.push(await createMs(true));
      const into = join(scratch, String(i));
      mkdirSync(into);
      const t0 = performance.now();
      // Not execFileSync: the git server answers from this process's event loop.
      await execFileAsync("git", ["clone", "-q", "--depth", "1", url, join(into, "big")]);
      direct.push(performance.now() - t0);
    }
    const cloneMs = percentile(clones, 50) - percentile(plain, 50);
    return [
      figure({ bench: "exec", metric: `clone of a ${megabytes} MB repository (create→running with it, less without)`, value: cloneMs, unit: "ms", baseline: { name: "git clone --depth 1 run directly", value: percentile(direct, 50) } }),
    ];
  } finally {
    await git.close();
    rmSync(scratch, { recursive: true, force: true });
    rmSync(src.root, { recursive: true, force: true });
  }
}
