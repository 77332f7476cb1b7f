/**
 * One stack per sandbox backend, measured in turn (sandbox-runner.ts): the
 * same creates, echoes and output on each, accumulated per side. Each
 * measurement starts once the side's runner is settled (its warm pool full,
 * no session network being built or torn down), as for a user whose creates
 * are more than a sandbox start apart.
 */
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { startStack, type Stack } from "@paddock/testing";
import { stopStackKeepingData } from "./leftovers.ts";
import { drain, echoSamples, openWs, post, runningWatch, stageClock, type RunningWatch } from "./terminal.ts";

export interface SideFigures {
  createMs: number[];
  /** The runner's part of each create: DISPATCH → its running fact (the rest is the control plane's, the same on both backends). */
  runnerMs: number[];
  /** The timed creates' apps by how they started (bwrap only): on a warm sandbox, or launched on the create's path. */
  starts: { warm: number; cold: number };
  echoMs: number[];
  output: { bytes: number; seconds: number };
}

export interface Side {
  stack: Stack;
  nc: NatsConnection;
  watch: RunningWatch;
  clock: Awaited<ReturnType<typeof stageClock>>;
  /** The timed creates, for the stage report. */
  timed: Array<{ id: string; start: number }>;
  warmPool: number;
  figures: SideFigures;
  /** The stacks measured beside this one: each measurement waits for them to settle too (their teardowns are the host's CPU). */
  beside: Side[];
}

export async function openSide(runnerEnv: Record<string, string>, warmPool: number): Promise<Side> {
  const stack = await startStack({ validateOutgoing: false, runnerCapacity: 64, env: { gateway: { PADDOCK_WS_INPUT_FRAMES_PER_SECOND: "1000000" }, "runner-agent": runnerEnv } });
  const nc = await connect({ servers: stack.nats.url });
  const figures: SideFigures = { createMs: [], runnerMs: [], starts: { warm: 0, cold: 0 }, echoMs: [], output: { bytes: 0, seconds: 0 } };
  return { stack, nc, watch: await runningWatch(nc), clock: await stageClock(nc), timed: [], warmPool, figures, beside: [] };
}

export async function closeSide(side: Side): Promise<void> {
  side.watch.stop();
  await side.nc.drain();
  await stopStackKeepingData(side.stack);
}

/** Metrics of the side's runner, by name (0 when absent: the process backend has no pool). */
async function runnerGauges(side: Side): Promise<(name: string) => number> {
  const text = await (await fetch(`http://127.0.0.1:${String(side.stack.runners[0]?.ready.opsPort)}/metrics`)).text();
  return (name) => Number(new RegExp(`^${name} (\\d+)`, "m").exec(text)?.[1] ?? 0);
}

/**
 * Resolves once the runner's (and those beside it) warm pool holds its ready sandboxes
 * (paddock_sandbox_warm_ready) and no session network is being built or torn
 * down (paddock_sandbox_network_work): a refill or the previous session's
 * teardown is tens of ms of CPU that would land in the next figure on 2 cores.
 */
export async function settled(side: Side): Promise<void> {
  for (const one of [side, ...side.beside]) {
    const deadline = performance.now() + 60_000;
    for (;;) {
      const gauge = await runnerGauges(one);
      if (gauge("paddock_sandbox_warm_ready") >= one.warmPool && gauge("paddock_sandbox_network_work") === 0) break;
      if (performance.now() > deadline) throw new Error("a runner's warm pool did not fill (or its networks settle) within 60 s");
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  }
}

/** The runner's app starts so far by how they started (zero on the process backend, which counts none). */
async function appStarts(side: Side): Promise<{ warm: number; cold: number }> {
  const text = await (await fetch(`http://127.0.0.1:${String(side.stack.runners[0]?.ready.opsPort)}/metrics`)).text();
  const count = (start: string) => Number(new RegExp(`^paddock_sandbox_app_starts_total\\{start="${start}"\\} (\\d+)`, "m").exec(text)?.[1] ?? 0);
  return { warm: count("warm"), cold: count("cold") };
}

async function deleteSession(stack: Stack, id: string): Promise<void> {
  await fetch(`${stack.url}/v1/sessions/${id}`, { method: "DELETE", headers: { authorization: `Bearer ${stack.token}` } });
}

/**
 * POST → record running, one at a time as in the terminal bench: each starts
 * once the previous session's sandbox is gone (its destroyed fact) and the
 * runner settled. `warmup` first makes one untimed create: the runner's first
 * session pays for cold code paths on either backend.
 */
export async function createsOn(side: Side, samples: number, warmup: boolean): Promise<void> {
  const { stack, clock, figures } = side;
  let before: { warm: number; cold: number } | undefined;
  for (let i = warmup ? -1 : 0; i < samples; i++) {
    if (i === 0) before = await appStarts(side);
    await settled(side);
    const start = performance.now();
    const s = await post(stack, "/v1/sessions", { spec: { cmd: ["sh", "-c", "echo up; exec sleep 600"] } });
    clock.mark(s.id, "answered");
    await side.watch.untilRunning(s.id);
    clock.mark(s.id, "running");
    if (i >= 0) {
      figures.createMs.push(performance.now() - start);
      side.timed.push({ id: s.id, start });
    }
    await deleteSession(stack, s.id);
    await clock.destroyed(s.id);
  }
  const after = await appStarts(side);
  figures.starts.warm += after.warm - (before?.warm ?? after.warm);
  figures.starts.cold += after.cold - (before?.cold ?? after.cold);
}

/** Echo of one byte at a time on a `cat` session, started (and its refill settled) before the first sample. */
export async function echoesOn(side: Side, samples: number): Promise<void> {
  const { stack } = side;
  await settled(side);
  const s = await post(stack, "/v1/sessions", { spec: { cmd: ["cat"] } });
  await side.watch.untilRunning(s.id);
  await settled(side);
  const ws = await openWs(`${stack.url.replace("http", "ws")}/v1/sessions/${s.id}/terminal?mode=controller&since=all`, { authorization: `Bearer ${stack.token}` });
  side.figures.echoMs.push(...(await echoSamples(ws, samples, true)));
  ws.close();
  await deleteSession(stack, s.id);
}

/**
 * The session's output once it runs: it waits for a line before it writes,
 * so neither its start nor (bwrap) its pool's refill is in the time.
 */
export async function outputOn(side: Side, megabytes: number): Promise<void> {
  const { stack } = side;
  await settled(side);
  const cmd = ["sh", "-c", `read go; head -c ${Math.round(megabytes * 1024 * 1024)} /dev/zero | tr '\\0' 'x' | fold -w 100`];
  const s = await post(stack, "/v1/sessions", { spec: { cmd } });
  const ws = await openWs(`${stack.url.replace("http", "ws")}/v1/sessions/${s.id}/terminal?mode=controller&since=all`, { authorization: `Bearer ${stack.token}` });
  await side.watch.untilRunning(s.id);
  await settled(side);
  const live = drain(ws, true);
  ws.send(Buffer.from("go\n"), { binary: true });
  const out = await live;
  side.figures.output.bytes += out.bytes;
  side.figures.output.seconds += out.seconds;
  await deleteSession(stack, s.id);
}
