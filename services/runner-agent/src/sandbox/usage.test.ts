import { spawn } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { describe, expect, it } from "vitest";
import { SESSION_METRICS_RETENTION_MS } from "@paddock/contracts";
import { storageBytes, UsageMeter } from "./usage.ts";

describe("usage meter", () => {
  it("measures CPU and memory of the app's process group and the workspace's storage", async () => {
    const dir = mkdtempSync(join(tmpdir(), "paddock-usage-"));
    writeFileSync(join(dir, "blob"), Buffer.alloc(123_456));
    // A process group that burns CPU, says so, then idles.
    const child = spawn("sh", ["-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; echo burnt; exec sleep 600"], { detached: true });
    let clock = 1_000;
    const meter = new UsageMeter(() => ({ groups: child.pid ? [child.pid] : [] }), () => clock, 60_000);
    await meter.sample();
    await new Promise<void>((resolve) => createInterface({ input: child.stdout }).on("line", (l) => l === "burnt" && resolve()));
    clock += 10_000;
    const usage = await meter.finish(dir);
    process.kill(-(child.pid ?? 0), "SIGKILL");
    expect(usage.cpuTimeSeconds).toBeGreaterThan(0);
    expect(usage.memoryByteSeconds).toBeGreaterThan(0);
    expect(usage.storageBytes).toBe(123_456);
    expect(usage.networkBytes).toBe(0);
  });

  it("takes CPU time from the session's cgroup where the scope has one: what it used since the generation began; /proc's figure when the cgroup is gone", async () => {
    const dir = mkdtempSync(join(tmpdir(), "paddock-usage-"));
    // A uid with no process: /proc counts nothing for it, so only the cgroup's figure can show.
    const idle = 2 ** 31 - 3;
    let nanos: number | undefined = 7_000_000_000;
    const meter = new UsageMeter(() => ({ uid: idle, cpuNanos: () => nanos }), () => 0, 60_000);
    nanos = 9_500_000_000;
    expect((await meter.finish(dir)).cpuTimeSeconds).toBe(2.5);
    nanos = 7_000_000_000;
    const gone = new UsageMeter(() => ({ uid: idle, cpuNanos: () => nanos }), () => 0, 60_000);
    nanos = undefined;
    expect((await gone.finish(dir)).cpuTimeSeconds).toBe(0);
  });

  it("counts regular files only, without following links", async () => {
    const dir = mkdtempSync(join(tmpdir(), "paddock-usage-"));
    writeFileSync(join(dir, "a"), "12345");
    const { symlinkSync, mkdirSync } = await import("node:fs");
    mkdirSync(join(dir, "sub"));
    writeFileSync(join(dir, "sub", "b"), "123");
    symlinkSync("/etc/passwd", join(dir, "link"));
    expect(await storageBytes(dir)).toBe(8);
  });

  it("measures a directory wider than one walk slice, nested trees and a missing directory", async () => {
    const dir = mkdtempSync(join(tmpdir(), "paddock-usage-"));
    const { mkdirSync } = await import("node:fs");
    // 700 files at one level: the walk yields between slices of 256 and must neither skip nor repeat any.
    for (let i = 0; i < 700; i++) writeFileSync(join(dir, `f${i}`), Buffer.alloc(i % 7));
    mkdirSync(join(dir, "a", "b", "c"), { recursive: true });
    writeFileSync(join(dir, "a", "b", "c", "deep"), Buffer.alloc(1000));
    let expected = 1000;
    for (let i = 0; i < 700; i++) expected += i % 7;
    expect(await storageBytes(dir)).toBe(expected);
    expect(await storageBytes(join(dir, "no-such-dir"))).toBe(0);
  });
});

describe("usage meter samples (per-session metrics)", () => {
  it("keeps the last retention's samples oldest first, CPU cumulative, the workspace walked at most every 30 s unless fresh", async () => {
    const dir = mkdtempSync(join(tmpdir(), "paddock-usage-ring-"));
    const idle = 2 ** 31 - 3;
    let nanos = 1_000_000_000;
    let clock = 0;
    let egress = 0;
    // Three samples fit the hour at 20 minutes each.
    const meter = new UsageMeter(() => ({ uid: idle, cpuNanos: () => nanos }), () => clock, SESSION_METRICS_RETENTION_MS / 3, () => egress, dir);
    for (let i = 1; i <= 5; i++) {
      clock = i * 1_000;
      nanos += 500_000_000;
      egress += 10;
      if (i === 2) writeFileSync(join(dir, "blob"), Buffer.alloc(4_096));
      await meter.sample();
    }
    const samples = meter.samples();
    expect(samples.map((s) => [s.at, s.cpuSeconds, s.networkBytes])).toEqual([
      [3_000, 1.5, 30],
      [4_000, 2, 40],
      [5_000, 2.5, 50],
    ]);
    // Walked at the first sample (empty) and not again within 30 s: the file written since is not counted yet...
    expect(samples.map((s) => s.diskBytes)).toEqual([0, 0, 0]);
    // ...until a fresh sample (a read of the metrics).
    clock = 6_000;
    await meter.sample(true);
    expect(meter.samples().at(-1)?.diskBytes).toBe(4_096);
    expect(meter.samples()).toHaveLength(3);
  });
});
