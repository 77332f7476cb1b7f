/**
 * The PTY wrapper's end-of-life ordering: every byte the program wrote comes
 * out before `exited` resolves. node-pty (patched, see patches/) otherwise
 * destroys the PTY socket 200 ms after the child is reaped, dropping output
 * still on its way — seen as a lost last line under CI load — and takes a
 * short read that comes with POLLHUP as the end of the output (libuv), while
 * the program's last bytes can still be on their way into the master.
 */
import { existsSync, watch } from "node:fs";
import { join } from "node:path";
import type { Socket } from "node:net";
import { spawn as spawnPty } from "@lydell/node-pty";
import { afterEach, describe, expect, it } from "vitest";
import { scratchDirs } from "@paddock/testing";
import { spawnApp, type AppProcess } from "./app-process.ts";

const dirs = scratchDirs("paddock-app-");
/** Process groups to kill after each test. */
const groups: number[] = [];
afterEach(() => {
  for (const pid of groups.splice(0)) {
    try {
      process.kill(-pid, "SIGKILL");
    } catch {
      // group already gone
    }
  }
  dirs.removeAll();
});

function start(script: string, size?: { cols: number; rows: number }): { proc: AppProcess; output: () => string } {
  const cwd = dirs.make();
  const chunks: Buffer[] = [];
  const proc = spawnApp({
    app: { name: "main", cmd: ["sh", "-c", script] },
    cwd,
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin" },
    onData: (bytes) => chunks.push(Buffer.from(bytes)),
    size,
  });
  groups.push(proc.pid);
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
  it("starts the PTY at 80 × 24, or at the size given (a restart keeps the size its terminal log is at)", async () => {
    const initial = start("stty size");
    expect(await initial.proc.exited).toMatchObject({ exitCode: 0 });
    expect(initial.output().trim()).toBe("24 80");
    const sized = start("stty size", { cols: 100, rows: 30 });
    expect(await sized.proc.exited).toMatchObject({ exitCode: 0 });
    expect(sized.output().trim()).toBe("30 100");
  });

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

  it("delivers every line of a program that writes a lot and exits at once", async () => {
    // The early end of the next test, as it happens: the master gives about
    // 4 KiB a read, so a program that exits with output still queued in the
    // terminal lost the rest in about one run of ten before the patch.
    const { proc, output } = start("seq 1 300000; exit 0");
    expect(await proc.exited).toEqual({ exitCode: 0, signal: undefined });
    const lines = output().split("\r\n").filter(Boolean);
    expect(lines).toHaveLength(300_000);
    expect(lines.at(-1)).toBe("300000");
  });

  it("reads what is left in the terminal when the stream reports its end early", async () => {
    // libuv ends the stream on a POLLHUP that comes with a short read, without
    // reading again; the slave's last output may then still be on its way into
    // the master (about one exit in 2,000 under load lost its last bytes). That
    // moment is made here: reading is stopped, the program writes and says so
    // through a file, and the stream reports its end as libuv would.
    const cwd = dirs.make();
    const pty = spawnPty("/bin/sh", ["-c", 'read x; printf "got:%s" "$x"; : > written; exec sleep 30'], {
      cwd,
      env: { PATH: process.env.PATH ?? "/usr/bin:/bin" },
      encoding: null,
    });
    groups.push(pty.pid);
    const chunks: Buffer[] = [];
    pty.onData((d: string | Buffer) => chunks.push(Buffer.from(d)));
    const socket = (pty as unknown as { _socket: Socket & { _handle: { readStop(): number } } })._socket;
    // node-pty starts reading on the next tick; stop it after that.
    await new Promise((r) => setImmediate(r));
    expect(socket._handle.readStop()).toBe(0);
    pty.write("abc\n");
    await untilExists(join(cwd, "written"));
    expect(chunks).toEqual([]);
    socket.emit("end");
    expect(Buffer.concat(chunks).toString("utf8")).toBe("abc\r\ngot:abc");
  });
});

/** Resolves once path exists (a file watch, not a poll). */
function untilExists(path: string): Promise<void> {
  return new Promise((resolve) => {
    const dir = join(path, "..");
    const watcher = watch(dir, () => check());
    const check = () => {
      if (!existsSync(path)) return;
      watcher.close();
      resolve();
    };
    check();
  });
}
