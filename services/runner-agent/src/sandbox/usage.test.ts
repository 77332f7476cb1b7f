import { spawn } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { describe, expect, it } from "vitest";
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
