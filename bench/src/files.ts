/**
 * The files routes (issue 24's performance goals): a 1 MiB write then read
 * of one file of a live session, and a listing of a directory of 10,000
 * entries, through the gateway and the runner on its default backend, each
 * beside the same operation on the local filesystem in the same run (what
 * the runner itself does at the end of the path).
 */
import { randomBytes } from "node:crypto";
import { lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connect } from "@nats-io/transport-node";
import { startStack } from "@paddock/testing";
import { stopStackKeepingData } from "./leftovers.ts";
import { figure, percentile, type Figure } from "./stats.ts";
import { post, runningWatch } from "./terminal.ts";

const MiB = 1024 * 1024;
const LIST_ENTRIES = 10_000;
/** A write this large goes past one bus message. */
const LARGE_MIB = 16;

const WARMUP = 3;

export async function filesBench(opts: { samples: number }): Promise<Figure[]> {
  const stack = await startStack({ validateOutgoing: false, env: { gateway: { PADDOCK_MAX_UPLOAD_BYTES: String(LARGE_MIB * MiB) } } });
  const nc = await connect({ servers: stack.nats.url });
  const watch = await runningWatch(nc);
  try {
    // The session makes the 10,000 entries itself (as its own uid), then waits.
    const s = await post(stack, "/v1/sessions", { spec: { cmd: ["sh", "-c", `mkdir many && cd many && seq ${LIST_ENTRIES} | xargs touch && echo ready > ../ready; exec sleep 3600`] } });
    await watch.untilRunning(s.id);
    const base = `${stack.url}/v1/sessions/${s.id}`;
    const auth = { authorization: `Bearer ${stack.token}` };
    await until(async () => (await fetch(`${base}/files?path=ready`, { headers: auth })).status === 200);
    const body = randomBytes(MiB);
    const writeMs: number[] = [];
    const readMs: number[] = [];
    // The first WARMUP rounds are not counted (as the preview bench's): a service's first calls run cold code.
    for (let i = 0; i < opts.samples + WARMUP; i++) {
      let t0 = performance.now();
      const put = await fetch(`${base}/files?path=f${i % 4}.bin`, { method: "PUT", headers: { ...auth, "content-type": "application/octet-stream" }, body });
      if (put.status !== 200) throw new Error(`write answered ${put.status}`);
      await put.arrayBuffer();
      if (i >= WARMUP) writeMs.push(performance.now() - t0);
      t0 = performance.now();
      const got = Buffer.from(await (await fetch(`${base}/files?path=f${i % 4}.bin`, { headers: auth })).arrayBuffer());
      if (i >= WARMUP) readMs.push(performance.now() - t0);
      if (!got.equals(body)) throw new Error("read back other bytes than were written");
    }
    const listMs: number[] = [];
    // Warmed up like the writes and reads: the first listings run cold code on the runner and the gateway.
    for (let i = 0; i < Math.max(3, Math.floor(opts.samples / 4)) + WARMUP; i++) {
      const t0 = performance.now();
      const res = (await (await fetch(`${base}/files/list?path=many`, { headers: auth })).json()) as { entries: unknown[] };
      if (i >= WARMUP) listMs.push(performance.now() - t0);
      if (res.entries.length !== LIST_ENTRIES) throw new Error(`listed ${res.entries.length} entries`);
    }
    const large = await largeWrites(base, auth, Math.max(3, Math.floor(opts.samples / 4)));
    const local = localBaselines(body, opts.samples);
    const p50 = (xs: number[]) => percentile(xs, 50);
    const bench = "files";
    return [
      figure({ bench, metric: "write 1 MiB (PUT) p50", value: p50(writeMs), unit: "ms", baseline: { name: "local writeFileSync p50", value: p50(local.writeMs) }, goal: "≤ 10 ms", met: p50(writeMs) <= 10 }),
      figure({ bench, metric: "write 1 MiB (PUT) p99", value: percentile(writeMs, 99), unit: "ms", baseline: { name: "local p99", value: percentile(local.writeMs, 99) } }),
      figure({ bench, metric: "read 1 MiB (GET) p50", value: p50(readMs), unit: "ms", baseline: { name: "local readFileSync p50", value: p50(local.readMs) }, goal: "≤ 10 ms", met: p50(readMs) <= 10 }),
      figure({ bench, metric: "read 1 MiB (GET) p99", value: percentile(readMs, 99), unit: "ms", baseline: { name: "local p99", value: percentile(local.readMs, 99) } }),
      figure({ bench, metric: `write ${LARGE_MIB} MiB (PUT) p50`, value: large.mbPerS, unit: "MB/s", baseline: { name: "local writeFileSync", value: large.localMbPerS } }),
      figure({ bench, metric: `list ${LIST_ENTRIES} entries p50`, value: p50(listMs), unit: "ms", baseline: { name: "local readdir + lstat p50", value: p50(local.listMs) }, goal: "≤ 100 ms", met: p50(listMs) <= 100 }),
    ];
  } finally {
    watch.stop();
    await nc.drain();
    await stopStackKeepingData(stack);
  }
}

/** A write past one bus message (the runner's data plane, else a transfer object), as MB/s at its p50, beside the local write's. */
async function largeWrites(base: string, auth: Record<string, string>, samples: number): Promise<{ mbPerS: number; localMbPerS: number }> {
  const body = randomBytes(LARGE_MIB * MiB);
  const ms: number[] = [];
  for (let i = 0; i < samples + 1; i++) {
    const t0 = performance.now();
    const put = await fetch(`${base}/files?path=large.bin`, { method: "PUT", headers: { ...auth, "content-type": "application/octet-stream" }, body });
    if (put.status !== 200) throw new Error(`a ${LARGE_MIB} MiB write answered ${put.status}`);
    await put.arrayBuffer();
    if (i > 0) ms.push(performance.now() - t0);
  }
  const dir = mkdtempSync(join(tmpdir(), "paddock-bench-large-"));
  const localMs: number[] = [];
  try {
    for (let i = 0; i < samples; i++) {
      const t0 = performance.now();
      writeFileSync(join(dir, "large.bin"), body);
      localMs.push(performance.now() - t0);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  const rate = (xs: number[]) => body.length / 1e6 / (percentile(xs, 50) / 1000);
  return { mbPerS: rate(ms), localMbPerS: rate(localMs) };
}

/** The same operations on a local directory, no network, no sandbox. */
function localBaselines(body: Buffer, samples: number): { writeMs: number[]; readMs: number[]; listMs: number[] } {
  const dir = mkdtempSync(join(tmpdir(), "paddock-bench-files-"));
  try {
    const writeMs: number[] = [];
    const readMs: number[] = [];
    for (let i = 0; i < samples; i++) {
      let t0 = performance.now();
      writeFileSync(join(dir, `f${i % 4}.bin`), body);
      writeMs.push(performance.now() - t0);
      t0 = performance.now();
      readFileSync(join(dir, `f${i % 4}.bin`));
      readMs.push(performance.now() - t0);
    }
    mkdirSync(join(dir, "many"));
    for (let i = 1; i <= LIST_ENTRIES; i++) writeFileSync(join(dir, "many", String(i)), "");
    const listMs: number[] = [];
    for (let i = 0; i < Math.max(3, Math.floor(samples / 4)); i++) {
      const t0 = performance.now();
      for (const name of readdirSync(join(dir, "many")).sort()) lstatSync(join(dir, "many", name));
      listMs.push(performance.now() - t0);
    }
    return { writeMs, readMs, listMs };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Re-checks a condition on the session's workspace (it has no event to wait on) until it holds. */
async function until(check: () => Promise<boolean>): Promise<void> {
  for (let i = 0; i < 600; i++) {
    if (await check()) return;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error("the session never made its files");
}
