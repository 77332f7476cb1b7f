/**
 * The PTY wrapper's end-of-life ordering: every byte the program wrote comes
 * out before `exited` resolves. node-pty (patched, see patches/) otherwise
 * destroys the PTY socket 200 ms after the child is reaped, dropping output
 * still on its way — seen as a lost last line under CI load.
 */
import { afterEach, describe, expect, it } from "vitest";
import { scratchDirs } from "@paddock/testing";
import { spawnApp, type AppProcess } from "./app-process.ts";

const dirs = scratchDirs("paddock-app-");
const procs: AppProcess[] = [];
afterEach(() => {
  for (const p of procs.splice(0)) {
    try {
      process.kill(-p.pid, "SIGKILL");
    } catch {
      // group already gone
    }
  }
  dirs.removeAll();
});

function start(script: string): { proc: AppProcess; output: () => string } {
  const cwd = dirs.make();
  const chunks: Buffer[] = [];
  const proc = spawnApp({
    app: { name: "main", cmd: ["sh", "-c", script] },
    cwd,
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin" },
    onData: (bytes) => chunks.push(Buffer.from(bytes)),
  });
  procs.push(proc);
  return { proc, output: () => Buffer.concat(chunks).toString("utf8") };
}

/** Resolves once the kernel no longer knows the pid (the child exited and was reaped). */
async function reaped(pid: number): Promise<void> {
  for (;;) {
    try {
      process.kill(pid, 0);
    } catch {
      return;
    }
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe("spawnApp (PTY)", () => {
  it("delivers every byte before exit even when reading was paused as the program exited", async () => {
    const { proc, output } = start("i=0; while [ $i -lt 200 ]; do echo line$i; i=$((i+1)); done; exit 7");
    proc.setPaused(true);
    await reaped(proc.pid);
    // Stay paused well past node-pty's old 200 ms destroy timer, as a stalled terminal log would.
    await new Promise((r) => setTimeout(r, 800));
    proc.setPaused(false);
    expect(await proc.exited).toEqual({ exitCode: 7, signal: undefined });
    const lines = output().split("\r\n").filter(Boolean);
    expect(lines).toHaveLength(200);
    expect(lines.at(-1)).toBe("line199");
  });

  it("still reports the exit when a background child keeps the terminal open", async () => {
    const { proc, output } = start("sleep 30 & echo started; exit 3");
    expect(await proc.exited).toEqual({ exitCode: 3, signal: undefined });
    expect(output()).toContain("started");
  });
});
