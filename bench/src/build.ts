/**
 * The production build against the development start (issue 29 item 1): each
 * service started from its bundle with plain `node`, beside the same service
 * started from TypeScript through the tsx loader, in the same run against the
 * same nats-server. Start is spawn → the service's "ready" log line (its
 * storage opened, its subscriptions made); idle RSS is read from /proc once
 * it has been ready and idle for a second.
 */
import { spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { repoRoot, startNatsServer, startService, type ServiceName, type ServiceProcess } from "@paddock/testing";
import { figure, percentile, type Figure } from "./stats.ts";

const IDLE_SETTLE_MS = 1_000;
const SERVICES: readonly ServiceName[] = ["scheduler", "event-recorder", "gateway", "runner-agent"];

function rssMiB(pid: number | undefined): number {
  const status = readFileSync(`/proc/${String(pid)}/status`, "utf8");
  const kib = Number(/VmRSS:\s+(\d+) kB/.exec(status)?.[1] ?? Number.NaN);
  return kib / 1024;
}

function envOf(name: ServiceName, natsUrl: string, dataDir: string): Record<string, string> {
  const common = { PADDOCK_NATS_URL: natsUrl, PADDOCK_LOG_LEVEL: "info", PADDOCK_OPS_PORT: "0" };
  const own: Record<ServiceName, Record<string, string>> = {
    scheduler: { PADDOCK_SESSION_TOKEN_SECRET: randomBytes(24).toString("hex") },
    "event-recorder": {},
    gateway: { PADDOCK_HTTP_PORT: "0", PADDOCK_DEV_TOKEN: `pdk_dev_${randomBytes(18).toString("hex")}` },
    "runner-agent": { PADDOCK_RUNNER_ID: "bench-runner", PADDOCK_RUNNER_DATA_DIR: join(dataDir, "runner") },
  };
  return { ...common, ...own[name] };
}

async function sample(name: ServiceName, built: boolean, natsUrl: string, dataDir: string): Promise<{ startMs: number; rss: number }> {
  const t0 = performance.now();
  const svc = await startService(name, envOf(name, natsUrl, dataDir), { built });
  const startMs = performance.now() - t0;
  await sleep(IDLE_SETTLE_MS);
  const rss = rssMiB(svc.process.pid);
  await svc.stop();
  return { startMs, rss };
}

export async function buildBench(opts: { samples: number }): Promise<Figure[]> {
  const built = spawnSync(process.execPath, ["--import", "tsx", "scripts/build.ts", "--only", "services"], { cwd: repoRoot, stdio: "inherit" });
  if (built.status !== 0) throw new Error("npm run build failed: the build bench needs the bundles");
  const nats = await startNatsServer();
  const dataDir = mkdtempSync(join(tmpdir(), "paddock-bench-build-"));
  const figures: Figure[] = [];
  // A runner is ready once a scheduler has taken it in: it gets one of its own (started after the scheduler's samples).
  let scheduler: ServiceProcess | undefined;
  try {
    for (const name of SERVICES) {
      if (name === "runner-agent") scheduler = await startService("scheduler", envOf("scheduler", nats.url, dataDir), { built: true });
      const runs = { tsx: [] as Array<{ startMs: number; rss: number }>, built: [] as Array<{ startMs: number; rss: number }> };
      // Interleaved, so a slower moment of the machine falls on both sides alike.
      for (let i = 0; i < opts.samples; i++) {
        runs.tsx.push(await sample(name, false, nats.url, dataDir));
        runs.built.push(await sample(name, true, nats.url, dataDir));
      }
      const med = (xs: number[]) => percentile(xs, 50);
      const tsxStart = med(runs.tsx.map((r) => r.startMs));
      const tsxRss = med(runs.tsx.map((r) => r.rss));
      figures.push(
        figure({ bench: "build", metric: `${name} start → ready p50 (built)`, value: med(runs.built.map((r) => r.startMs)), unit: "ms", baseline: { name: "tsx", value: tsxStart } }),
        figure({ bench: "build", metric: `${name} idle RSS p50 (built)`, value: med(runs.built.map((r) => r.rss)), unit: "MiB", baseline: { name: "tsx", value: tsxRss } }),
      );
    }
  } finally {
    await scheduler?.stop();
    await nats.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
  return figures;
}
