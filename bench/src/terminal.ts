import { createInterface } from "node:readline";
import { DeliverPolicy, jetstream } from "@nats-io/jetstream";
import { KvWatchInclude, Kvm } from "@nats-io/kv";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import WebSocket from "ws";
import { decodeOutputFrame, Subjects, type Session } from "@paddock/contracts";
import { startStack, type Stack } from "@paddock/testing";
import { barePtySpawnMs, startBridge, startBridgeProcess, type Bridge } from "./baselines.ts";
import { cpuMeter, profiledServiceEnv } from "./cpu.ts";
import { spawnBenchScript } from "./bench-process.ts";
import { figure, percentile, type Figure } from "./stats.ts";
import { stopStackKeepingData } from "./leftovers.ts";

export async function post(stack: Stack, path: string, body: unknown): Promise<Session> {
  const res = await fetch(`${stack.url}${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${stack.token}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  if (res.status !== 201) throw new Error(`create answered ${res.status}`);
  return (await res.json()) as Session;
}

/**
 * Tells when a session's record turns running, from one KV watch started
 * before any create: the observer sets up nothing (no stream info, no
 * consumer) on the path it times.
 */
export interface RunningWatch {
  untilRunning(id: string): Promise<void>;
  stop(): void;
}

export async function runningWatch(nc: NatsConnection): Promise<RunningWatch> {
  const kv = await new Kvm(nc).open("sessions");
  const w = await kv.watch({ key: "default.*", include: KvWatchInclude.UpdatesOnly });
  const running = new Set<string>();
  const waiters = new Map<string, () => void>();
  void (async () => {
    for await (const e of w) {
      if (e.operation !== "PUT" || e.json<Session>().state !== "running") continue;
      const id = e.key.slice("default.".length);
      running.add(id);
      waiters.get(id)?.();
    }
  })();
  return {
    untilRunning: (id) => (running.has(id) ? Promise.resolve() : new Promise<void>((resolve) => waiters.set(id, resolve))),
    stop: () => w.stop(),
  };
}

export function openWs(url: string, headers: Record<string, string> = {}): Promise<WebSocket> {
  const ws = new WebSocket(url, { headers });
  return new Promise((resolve, reject) => {
    ws.once("open", () => resolve(ws));
    ws.once("error", reject);
  });
}

const log = (m: string) => process.stderr.write(`[bench] ${m}\n`);

/**
 * Where one create's time goes, seen from the bench's clock: the POST answer,
 * the start command on DISPATCH, the runner's running fact on RUNNER, and the
 * record turning running (core NATS sees the stream subjects as they are
 * published). Also tells when a deleted session's sandbox is gone.
 */
export async function stageClock(nc: NatsConnection) {
  const at = new Map<string, Record<string, number>>();
  const gone = new Map<string, () => void>();
  const mark = (id: string, stage: string) => {
    const m = at.get(id) ?? {};
    m[stage] ??= performance.now();
    at.set(id, m);
  };
  const factOf = (data: Uint8Array) => JSON.parse(new TextDecoder().decode(data)) as { sessionId?: string; type?: string };
  const subs = [
    nc.subscribe("paddock.dispatch.>", {
      callback: (_err, m) => {
        const { sessionId } = factOf(m.data);
        if (sessionId) mark(sessionId, "dispatched");
      },
    }),
    nc.subscribe("paddock.runner.*.*.events", {
      callback: (_err, m) => {
        const { sessionId, type } = factOf(m.data);
        if (!sessionId) return;
        if (type === "running") mark(sessionId, "fact");
        if (type === "destroyed") {
          mark(sessionId, "destroyed");
          gone.get(sessionId)?.();
        }
      },
    }),
  ];
  await nc.flush();
  return {
    mark,
    destroyed(id: string): Promise<void> {
      if (at.get(id)?.destroyed !== undefined) return Promise.resolve();
      return new Promise((resolve) => gone.set(id, resolve));
    },
    /** Logs the stages; answers the runner's part of each create (DISPATCH → running fact). */
    report(samples: Array<{ id: string; start: number }>): number[] {
      const stage = (from: string, to: string) =>
        samples.flatMap(({ id, start }) => {
          const m: Record<string, number> = { start, ...at.get(id) };
          const a = m[from];
          const b = m[to];
          return a !== undefined && b !== undefined ? [b - a] : [];
        });
      const line = (name: string, v: number[]) => `${name} p50 ${percentile(v, 50).toFixed(1)} p99 ${percentile(v, 99).toFixed(1)}`;
      log(
        `create stages (ms): ${line("POST → answered", stage("start", "answered"))}; ${line("answered → start on DISPATCH", stage("answered", "dispatched"))}; ` +
          `${line("DISPATCH → running fact", stage("dispatched", "fact"))}; ${line("fact → record running", stage("fact", "running"))}`,
      );
      for (const sub of subs) sub.unsubscribe();
      return stage("dispatched", "fact");
    },
  };
}

/**
 * Benchmark 2: POST → running through every service, against a bare PTY
 * spawn of the same command. The goal is for an idle system, so each sample
 * starts once the previous session's sandbox is gone (its destroyed fact):
 * the teardown (kill, exit marker, usage, rm) is not timed into the next create.
 */
async function createLatency(stack: Stack, nc: NatsConnection, watch: RunningWatch, samples: number): Promise<Figure[]> {
  const cmd = ["sh", "-c", "echo up; exec sleep 600"];
  const ms: number[] = [];
  const clock = await stageClock(nc);
  const timed: Array<{ id: string; start: number }> = [];
  for (let i = 0; i < samples; i++) {
    const start = performance.now();
    const s = await post(stack, "/v1/sessions", { spec: { cmd } });
    clock.mark(s.id, "answered");
    await watch.untilRunning(s.id);
    clock.mark(s.id, "running");
    ms.push(performance.now() - start);
    timed.push({ id: s.id, start });
    await fetch(`${stack.url}/v1/sessions/${s.id}`, { method: "DELETE", headers: { authorization: `Bearer ${stack.token}` } });
    await clock.destroyed(s.id);
  }
  clock.report(timed);
  const bare = await barePtySpawnMs(cmd, samples);
  const overhead = percentile(ms, 50) - percentile(bare, 50);
  return [
    figure({ bench: "2 create→running", metric: "p50", value: percentile(ms, 50), unit: "ms", baseline: { name: "bare PTY spawn p50", value: percentile(bare, 50) }, goal: "≤ 30 ms", met: percentile(ms, 50) <= 30 }),
    figure({ bench: "2 create→running", metric: "p99", value: percentile(ms, 99), unit: "ms", baseline: { name: "bare PTY spawn p99", value: percentile(bare, 99) }, goal: "≤ 100 ms", met: percentile(ms, 99) <= 100 }),
    figure({ bench: "2 create→running", metric: "control-plane overhead p50", value: overhead, unit: "ms", goal: "≤ 15 ms", met: overhead <= 15 }),
  ];
}

/** Sends one byte at a time and times its echo in the message handler. */
export async function echoSamples(ws: WebSocket, samples: number, framed: boolean): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < samples; i++) {
    const ch = String.fromCharCode(97 + (i % 26));
    const start = performance.now();
    await new Promise<void>((resolve, reject) => {
      const onMessage = (data: Buffer, isBinary: boolean) => {
        if (!isBinary) {
          // An error frame (e.g. rate_limited: the keystroke was dropped) would leave this sample waiting forever.
          const frame = JSON.parse(data.toString()) as { type?: string; code?: string };
          if (frame.type === "error") reject(new Error(`echo sample ${i}: gateway answered ${frame.code ?? "an error"}`));
          return;
        }
        const bytes = framed ? Buffer.from(decodeOutputFrame(data).bytes) : data;
        if (!bytes.toString().includes(ch)) return;
        out.push(performance.now() - start);
        ws.off("message", onMessage);
        resolve();
      };
      ws.on("message", onMessage);
      ws.send(Buffer.from(ch));
    });
  }
  return out;
}

async function bridgeEchoSamples(bridge: Bridge, samples: number): Promise<number[]> {
  const ws = await openWs(bridge.url);
  const out = await echoSamples(ws, samples, false);
  ws.close();
  await bridge.close();
  return out;
}

/** Benchmark 3: keystroke → echo through gateway → runner → PTY → back, against a direct bridge. */
async function echoLatency(stack: Stack, watch: RunningWatch, samples: number): Promise<Figure[]> {
  const s = await post(stack, "/v1/sessions", { spec: { cmd: ["cat"] } });
  await watch.untilRunning(s.id);
  const ws = await openWs(`${stack.url.replace("http", "ws")}/v1/sessions/${s.id}/terminal?mode=controller&since=all`, { authorization: `Bearer ${stack.token}` });
  const paddock = await echoSamples(ws, samples, true);
  const underPaste = await echoWhilePasting(stack, watch, ws, samples);
  const underStream = await echoWhileStreaming(stack, watch, ws, samples);
  ws.close();
  const direct = await bridgeEchoSamples(await startBridgeProcess(["cat"]), samples);
  const inProcess = await bridgeEchoSamples(await startBridge(["cat"]), samples);
  const bridgeP50 = percentile(direct, 50);
  // Issue 30 item 4: p50 within 0.3 ms of the bridge and p99 ≤ 5 ms, alone and beside a session streaming at full speed.
  const p50Goal = (samples: number[]) => ({ goal: "≤ bridge + 0.3 ms", met: percentile(samples, 50) <= bridgeP50 + 0.3 });
  const p99Goal = (samples: number[]) => ({ goal: "≤ 5 ms", met: percentile(samples, 99) <= 5 });
  return [
    figure({ bench: "3 echo", metric: "p50", value: percentile(paddock, 50), unit: "ms", baseline: { name: "direct bridge p50", value: bridgeP50 }, ...p50Goal(paddock) }),
    figure({ bench: "3 echo", metric: "p99", value: percentile(paddock, 99), unit: "ms", baseline: { name: "direct bridge p99", value: percentile(direct, 99) }, ...p99Goal(paddock) }),
    figure({ bench: "3 echo", metric: "p99 while a 1 MiB paste is pending in another session", value: percentile(underPaste, 99), unit: "ms", baseline: { name: "p99 alone", value: percentile(paddock, 99) }, goal: "≤ 10 ms", met: percentile(underPaste, 99) <= 10 }),
    figure({ bench: "3 echo", metric: "p50 while another session streams output at full speed", value: percentile(underStream, 50), unit: "ms", baseline: { name: "direct bridge p50", value: bridgeP50 }, ...p50Goal(underStream) }),
    figure({ bench: "3 echo", metric: "p99 while another session streams output at full speed", value: percentile(underStream, 99), unit: "ms", baseline: { name: "p99 alone", value: percentile(paddock, 99) }, ...p99Goal(underStream) }),
    // The same bridge sharing the bench's event loop (no process wake-up between client and bridge), for comparison.
    figure({ bench: "3 echo", metric: "p50 of the bridge in the bench's own process", value: percentile(inProcess, 50), unit: "ms" }),
    figure({ bench: "3 echo", metric: "p99 of the bridge in the bench's own process", value: percentile(inProcess, 99), unit: "ms" }),
  ];
}

/**
 * Echo samples on `ws` while another session on the same runner holds a
 * 1 MiB paste its program never reads: the runner's event loop must not be
 * held by it (a blocking write on the PTY master did exactly that).
 */
async function echoWhilePasting(stack: Stack, watch: RunningWatch, ws: WebSocket, samples: number): Promise<number[]> {
  const s = await post(stack, "/v1/sessions", { spec: { cmd: ["sh", "-c", "stty raw -echo; exec sleep 600"] } });
  await watch.untilRunning(s.id);
  const paste = await openWs(`${stack.url.replace("http", "ws")}/v1/sessions/${s.id}/terminal?mode=controller&since=all`, { authorization: `Bearer ${stack.token}` });
  const bytes = Buffer.alloc(1024 * 1024, 0x70);
  for (let at = 0; at < bytes.length; at += 16 * 1024) paste.send(bytes.subarray(at, at + 16 * 1024));
  // Wait until the runner has what fits in its queue (the rest waits in the gateway and TCP): one echo round trip behind it.
  await echoSamples(ws, 1, true);
  const out = await echoSamples(ws, samples, true);
  paste.terminate();
  await fetch(`${stack.url}/v1/sessions/${s.id}`, { method: "DELETE", headers: { authorization: `Bearer ${stack.token}` } });
  return out;
}

/**
 * Echo samples on `ws` while another session on the same runner writes log
 * lines as fast as its PTY takes them, with a viewer in another process
 * (bench/src/viewer-main.ts) reading them all: the keystroke shares the
 * runner, nats-server and the gateway with a full-speed stream, not the
 * measuring client's event loop.
 */
async function echoWhileStreaming(stack: Stack, watch: RunningWatch, ws: WebSocket, samples: number): Promise<number[]> {
  const s = await post(stack, "/v1/sessions", { spec: { cmd: ["sh", "-c", "yes 'a log line of a build going on and on, at full speed, 64 bytes'"] } });
  await watch.untilRunning(s.id);
  const viewer = spawnBenchScript("viewer-main.ts", [`${stack.url.replace("http", "ws")}/v1/sessions/${s.id}/terminal?mode=viewer`, stack.token]);
  const lines = createInterface({ input: viewer.stdout });
  const next = () => new Promise<number>((resolve, reject) => {
    lines.once("line", (line: string) => resolve(Number(line.split(" ")[1])));
    viewer.once("exit", () => reject(new Error("the viewer process exited")));
  });
  // The stream is flowing once the viewer has read a few MB of it.
  const before = await next();
  const start = performance.now();
  const out = await echoSamples(ws, samples, true);
  const seconds = (performance.now() - start) / 1000;
  const ended = next();
  viewer.stdin.end();
  process.stderr.write(`[bench] echo beside a stream: the viewer read ${(((await ended) - before) / 1e6 / seconds).toFixed(1)} MB/s meanwhile\n`);
  await fetch(`${stack.url}/v1/sessions/${s.id}`, { method: "DELETE", headers: { authorization: `Bearer ${stack.token}` } });
  return out;
}

/** Bytes received until the socket closes, in MB/s. */
export function drain(ws: WebSocket, framed: boolean): Promise<{ bytes: number; seconds: number }> {
  const start = performance.now();
  let bytes = 0;
  ws.on("message", (data: Buffer, isBinary: boolean) => {
    if (isBinary) bytes += framed ? data.byteLength - 8 : data.byteLength;
  });
  return new Promise((resolve) => ws.once("close", () => resolve({ bytes, seconds: (performance.now() - start) / 1000 })));
}

async function bridgeOutputMBs(bridge: Bridge): Promise<number> {
  const direct = await drain(await openWs(bridge.url), false);
  await bridge.close();
  return direct.bytes / 1e6 / direct.seconds;
}

/** Attaches measured for the since=screen figure. */
const SCREEN_ATTACHES = 9;

/**
 * Upgrade request → first binary frame of a since=screen attach, and → its
 * hello (the handshake alone: token, membership, the attach rpc), the
 * baseline that says how much of the figure is the snapshot.
 */
async function screenFirstFrameMs(stack: Stack, sessionId: string): Promise<{ frameMs: number; helloMs: number }> {
  const start = performance.now();
  const ws = new WebSocket(`${stack.url.replace("http", "ws")}/v1/sessions/${sessionId}/terminal?since=screen`, { headers: { authorization: `Bearer ${stack.token}` } });
  let helloMs = Number.NaN;
  const frameMs = await new Promise<number>((resolve) =>
    ws.on("message", (_d, isBinary) => {
      if (isBinary) resolve(performance.now() - start);
      else if (Number.isNaN(helloMs)) helloMs = performance.now() - start;
    }),
  );
  ws.close();
  return { frameMs, helloMs };
}

/** Benchmarks 4 and 5: live output throughput against the bridge; replay rate and time to a screen snapshot. */
async function outputAndReplay(stack: Stack, nc: NatsConnection, watch: RunningWatch, megabytes: number): Promise<Figure[]> {
  const cmd = ["sh", "-c", `head -c ${megabytes * 1024 * 1024} /dev/zero | tr '\\0' 'x' | fold -w 100`];
  // The bridge runs before and after the live run and the baseline is their mean: this VM's
  // speed drifts within a minute (the bridge alone measured 15-21 MB/s in one session), and
  // bracketing cancels a steady drift instead of charging it to one side.
  const bridgeBefore = await bridgeOutputMBs(await startBridgeProcess(cmd));
  const s = await post(stack, "/v1/sessions", { spec: { cmd } });
  const ws = await openWs(`${stack.url.replace("http", "ws")}/v1/sessions/${s.id}/terminal?since=all`, { authorization: `Bearer ${stack.token}` });
  const cpu = cpuMeter({ nats: stack.nats.process.pid, runner: stack.runners[0]?.process.pid, gateway: stack.gateway.process.pid });
  const live = await drain(ws, true);
  log(`live: ${(live.bytes / 1e6).toFixed(0)} MB in ${live.seconds.toFixed(1)} s; ${cpu().text}`);
  const bridgeAfter = await bridgeOutputMBs(await startBridgeProcess(cmd));
  const bridgeMBs = (bridgeBefore + bridgeAfter) / 2;
  log(`direct bridge: ${bridgeBefore.toFixed(1)} MB/s before, ${bridgeAfter.toFixed(1)} MB/s after the live run`);
  const inProcessMBs = await bridgeOutputMBs(await startBridge(cmd));
  const liveMBs = live.bytes / 1e6 / live.seconds;

  log("bridge done; replaying since=all");
  const replay = await drain(await openWs(`${stack.url.replace("http", "ws")}/v1/sessions/${s.id}/terminal?since=all`, { authorization: `Bearer ${stack.token}` }), true);
  log(`replay: ${(replay.bytes / 1e6).toFixed(0)} MB in ${replay.seconds.toFixed(1)} s`);
  const rawStart = performance.now();
  let rawBytes = 0;
  const consumer = await jetstream(nc).consumers.get("TERM", { filter_subjects: [Subjects.termOfApp(s.id, "main")], deliver_policy: DeliverPolicy.All });
  let pending = (await consumer.info()).num_pending;
  log(`log: ${pending} chunks, ${(replay.bytes / Math.max(1, pending) / 1024).toFixed(1)} KiB on average`);
  for await (const m of await consumer.consume()) {
    rawBytes += m.data.byteLength;
    if (--pending === 0) break;
  }
  const rawMBs = rawBytes / 1e6 / ((performance.now() - rawStart) / 1000);

  // A screen served from the runner's checkpoint is not cached, so each attach does the whole
  // work again: several give the typical figure rather than one sample of this VM's noise. The
  // first also pays for the gateway's cold code path (30-45 ms against 10-16 here); the log line
  // prints every sample.
  const screenMs: number[] = [];
  const helloMs: number[] = [];
  for (let i = 0; i < SCREEN_ATTACHES; i++) {
    const attach = await screenFirstFrameMs(stack, s.id);
    screenMs.push(attach.frameMs);
    helloMs.push(attach.helloMs);
  }
  const firstFrameMs = percentile(screenMs, 50);
  log(`since=screen first frame over ${SCREEN_ATTACHES} attaches: ${screenMs.map((v) => v.toFixed(1)).join(", ")} ms`);
  return [
    figure({ bench: "4 output", metric: `${megabytes} MB live to a client`, value: liveMBs, unit: "MB/s", baseline: { name: "direct bridge (mean of before and after)", value: bridgeMBs }, goal: "≥ 0.8x bridge", met: liveMBs >= 0.8 * bridgeMBs }),
    figure({ bench: "4 output", metric: "bridge in the bench's own process", value: inProcessMBs, unit: "MB/s" }),
    figure({ bench: "5 replay", metric: `since=all of ${(replay.bytes / 1e6).toFixed(0)} MB`, value: replay.bytes / 1e6 / replay.seconds, unit: "MB/s", baseline: { name: "raw ordered consume", value: rawMBs }, goal: "≥ 50 MB/s", met: replay.bytes / 1e6 / replay.seconds >= 50 }),
    figure({ bench: "5 replay", metric: `since=screen first frame p50 (${SCREEN_ATTACHES} attaches)`, value: firstFrameMs, unit: "ms", baseline: { name: "its hello p50", value: percentile(helloMs, 50) }, goal: "≤ 50 ms", met: firstFrameMs <= 50 }),
  ];
}

export async function terminalBenches(opts: { latencySamples: number; echoSamples: number; megabytes: number }): Promise<Figure[]> {
  // The bench measures the data path, not the per-socket input rate limit (200 frames/s by default).
  // PADDOCK_BENCH_PROFILE_DIR=DIR writes V8 CPU profiles of the services there.
  const prof = profiledServiceEnv();
  const stack = await startStack({
    validateOutgoing: false,
    runnerCapacity: 64,
    env: { gateway: { ...prof, PADDOCK_WS_INPUT_FRAMES_PER_SECOND: "1000000" }, scheduler: prof, "runner-agent": prof },
  });
  const nc = await connect({ servers: stack.nats.url });
  const watch = await runningWatch(nc);
  try {
    return [
      ...(await createLatency(stack, nc, watch, opts.latencySamples)),
      ...(await echoLatency(stack, watch, opts.echoSamples)),
      ...(await outputAndReplay(stack, nc, watch, opts.megabytes)),
    ];
  } finally {
    watch.stop();
    await nc.drain();
    await stopStackKeepingData(stack);
  }
}
