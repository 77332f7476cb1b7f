/**
 * Previews (issue 25's performance goals), through the gateway and a runner
 * on its default backend, each beside a baseline measured in the same run:
 * a small GET's latency beside the same GET to the same app on the host's
 * loopback (the same node app, started directly); an N MB download beside
 * the direct one; and the time a preview request takes to its first byte
 * when it wakes a warm-suspended session, and a cold-suspended one with
 * 10 MB in its workspace onto another runner (its own cordoned).
 */
import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { once } from "node:events";
import { connect } from "@nats-io/transport-node";
import { PREVIEW_APP_PATH, previewAppSpec, putPreviewApp, startStack, untilAnswers, type Stack } from "@paddock/testing";
import { stopStackKeepingData } from "./leftovers.ts";
import { figure, percentile, type Figure } from "./stats.ts";
import { post, runningWatch } from "./terminal.ts";

const DIRECT_PORT = 18_777;
const MiB = 1024 * 1024;
/** Unmeasured downloads per path first, then timed ones; the figure is each path's median. */
const WARM_DOWNLOADS = 5;
const DOWNLOADS = 3;

export async function previewBench(opts: { samples: number; megabytes: number }): Promise<Figure[]> {
  const direct = await startDirect();
  const stack = await startStack({ validateOutgoing: false });
  const nc = await connect({ servers: stack.nats.url });
  const watch = await runningWatch(nc);
  try {
    const s = await post(stack, "/v1/sessions", { spec: { apps: [previewAppSpec("web", [{ port: 8000, public: true }])] } });
    await watch.untilRunning(s.id);
    await putPreviewApp(stack.url, stack.token, s.id);
    const url = `${stack.url}/v1/sessions/${s.id}/ports/8000`;
    await untilAnswers(`${url}/`);
    const bench = "preview";
    const through = await latencies(`${url}/`, opts.samples);
    const local = await latencies(`http://127.0.0.1:${DIRECT_PORT}/`, opts.samples);
    const p50 = percentile(through, 50);
    const localP50 = percentile(local, 50);
    // Downloads each first, unmeasured: both paths timed warm (a long download's steady rate is what a user sees).
    // One was not enough: the proxy's code paths were still being optimised (measured: 63 MB/s over the first
    // five 20 MB downloads, 194 MB/s over twenty-five).
    for (let i = 0; i < WARM_DOWNLOADS; i++) {
      await download(`${url}/big?mb=${opts.megabytes}`);
      await download(`http://127.0.0.1:${DIRECT_PORT}/big?mb=${opts.megabytes}`);
    }
    // Then DOWNLOADS of each, alternating, and the median of each: one download's rate swings 2x on this VM.
    const viaPreviewMBs: number[] = [];
    const directRatesMBs: number[] = [];
    for (let i = 0; i < DOWNLOADS; i++) {
      viaPreviewMBs.push(await download(`${url}/big?mb=${opts.megabytes}`));
      directRatesMBs.push(await download(`http://127.0.0.1:${DIRECT_PORT}/big?mb=${opts.megabytes}`));
    }
    const downloadMBs = percentile(viaPreviewMBs, 50);
    const directMBs = percentile(directRatesMBs, 50);
    const warm = await wakeMs(stack, s.id, `${url}/`, true);
    // From cold onto another runner, with 10 MB in the workspace (the case): the first runner is cordoned meanwhile.
    const put = await fetch(`${stack.url}/v1/sessions/${s.id}/files?path=ten-mb.bin`, { method: "PUT", headers: { authorization: `Bearer ${stack.token}` }, body: randomBytes(10 * MiB) });
    if (put.status !== 200) throw new Error(`the 10 MB write answered ${put.status}`);
    await stack.addRunner({ runnerId: "runner-wake" });
    const cold = await wakeMs(stack, s.id, `${url}/`, false, "runner-1");
    return [
      figure({ bench, metric: "GET through the preview p50", value: p50, unit: "ms", baseline: { name: "direct loopback p50", value: localP50 }, goal: "≤ direct + 1 ms", met: p50 <= localP50 + 1 }),
      figure({ bench, metric: "GET through the preview p99", value: percentile(through, 99), unit: "ms", baseline: { name: "direct loopback p99", value: percentile(local, 99) }, goal: "≤ 10 ms", met: percentile(through, 99) <= 10 }),
      figure({ bench, metric: `download ${opts.megabytes} MB through the preview`, value: downloadMBs, unit: "MB/s", baseline: { name: "direct loopback", value: directMBs }, goal: "≥ 0.5x direct", met: downloadMBs >= 0.5 * directMBs }),
      figure({ bench, metric: "wake from warm, to the first byte", value: warm, unit: "ms", goal: "≤ 100 ms", met: warm <= 100 }),
      figure({ bench, metric: "wake from cold (10 MB, other runner), to the first byte", value: cold, unit: "ms", goal: "≤ 1 s", met: cold <= 1_000 }),
    ];
  } finally {
    watch.stop();
    await nc.drain();
    await stopStackKeepingData(stack);
    direct.kill("SIGKILL");
  }
}

/** The same app on the host's loopback, started directly: the baseline. */
async function startDirect(): Promise<ChildProcess> {
  const child = spawn(process.execPath, [PREVIEW_APP_PATH, String(DIRECT_PORT)], { stdio: ["ignore", "pipe", "inherit"] });
  await once(child.stdout as NodeJS.ReadableStream, "data");
  return child;
}

async function latencies(url: string, samples: number): Promise<number[]> {
  const ms: number[] = [];
  for (let i = 0; i < samples + 3; i++) {
    const t0 = performance.now();
    const res = await fetch(url);
    await res.arrayBuffer();
    if (res.status !== 200) throw new Error(`${url} answered ${res.status}`);
    if (i >= 3) ms.push(performance.now() - t0);
  }
  return ms;
}

/** MB/s of a whole download (bytes counted as they come, never held). */
async function download(url: string): Promise<number> {
  const t0 = performance.now();
  const res = await fetch(url);
  let bytes = 0;
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) bytes += chunk.byteLength;
  return bytes / MiB / ((performance.now() - t0) / 1000);
}

/** Suspends the session (warm or cold; cordoning `away` once suspended), then times a preview request from its send to its first byte. */
async function wakeMs(stack: Stack, sessionId: string, url: string, warm: boolean, away?: string): Promise<number> {
  const state = warm ? "suspended_warm" : "suspended_cold";
  const res = await fetch(`${stack.url}/v1/sessions/${sessionId}/suspend?wait=${state}&timeoutMs=60000`, { method: "POST", headers: { authorization: `Bearer ${stack.token}`, "content-type": "application/json" }, body: JSON.stringify({ warm }) });
  const body = (await res.json()) as { state?: string };
  if (body.state !== state) throw new Error(`suspend answered ${res.status} ${JSON.stringify(body).slice(0, 200)}`);
  if (away !== undefined) {
    const cordoned = await fetch(`${stack.url}/v1/runners/${away}/cordon`, { method: "POST", headers: { authorization: `Bearer ${stack.token}` } });
    if (cordoned.status !== 200) throw new Error(`cordon answered ${cordoned.status}`);
  }
  const t0 = performance.now();
  const answer = await fetch(url);
  const reader = (answer.body as ReadableStream<Uint8Array>).getReader();
  await reader.read();
  const ms = performance.now() - t0;
  await reader.cancel();
  if (answer.status !== 200) throw new Error(`the waking request answered ${answer.status}`);
  return ms;
}
