/**
 * Input to an app that is not reading: the runner queues it and writes the
 * PTY master without blocking (node-pty's own write retried EAGAIN in a busy
 * loop inside libuv, so 128 KiB into such a program froze the whole runner),
 * answers credit only once the queue drains, and the program gets every byte,
 * in order, once it reads.
 */
import { createHash, randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { afterEach, describe, expect, it } from "vitest";
import { headers } from "@nats-io/transport-node";
import { Headers, INPUT_LOW_WATER_BYTES, InputCredit, Subjects } from "@paddock/contracts";
import { createRunnerMetrics } from "../metrics.ts";
import { silentLogger } from "@paddock/logging";
import { scratchDirs } from "@paddock/testing";
import { useNatsServer } from "@paddock/testing/vitest";
import { spawnApp, type AppProcess } from "../sandbox/process/app-process.ts";
import { ControllerGate, subscribeInput, type InputAdmission } from "./input.ts";

const dirs = scratchDirs("paddock-input-");
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

/**
 * A program that stops itself before reading stdin; thaw() lets it read `size`
 * bytes and print their sha256. `ready` resolves once it is stopped (a thaw
 * sent before its own SIGSTOP would leave it stopped for good).
 */
function startStoppedReader(size: number, tty = true): { proc: AppProcess; output: () => string; ready: Promise<void> } {
  return startReader(size, { tty, stop: true });
}

/** Whether the process is in the stopped state (`T` in /proc/<pid>/stat). */
function isStopped(pid: number): boolean {
  const stat = readFileSync(`/proc/${String(pid)}/stat`, "utf8");
  return stat.slice(stat.lastIndexOf(")") + 2).startsWith("T");
}

async function untilStopped(pid: number): Promise<void> {
  // The kernel has no notification for another process stopping itself: check its state at each turn.
  while (!isStopped(pid)) await new Promise((resolve) => setTimeout(resolve, 5));
}

/** A program that reads `size` bytes of stdin and prints their sha256 (stopping itself first when asked). */
function startReader(size: number, opts: { tty?: boolean; stop?: boolean } = {}): { proc: AppProcess; output: () => string; ready: Promise<void> } {
  const tty = opts.tty ?? true;
  const chunks: Buffer[] = [];
  let onChunk = () => undefined as void;
  const proc = spawnApp({
    app: { name: "main", cmd: ["sh", "-c", `${tty ? "stty raw -echo; " : ""}printf 'ready\\n'; ${opts.stop ? "kill -STOP $$; " : ""}head -c ${String(size)} | sha256sum`], tty },
    cwd: dirs.make(),
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin" },
    onData: (bytes) => {
      chunks.push(Buffer.from(bytes));
      onChunk();
    },
  });
  groups.push(proc.pid);
  const output = () => Buffer.concat(chunks).toString("utf8");
  const printed = new Promise<void>((resolve) => {
    onChunk = () => {
      if (output().includes("ready")) resolve();
    };
  });
  const ready = opts.stop ? printed.then(() => untilStopped(proc.pid)) : printed;
  return { proc, output, ready };
}

/** Printable bytes (no terminal control characters) that a hash tells apart. */
function payload(size: number): Buffer {
  return Buffer.from(randomBytes(size).toString("base64").slice(0, size));
}

const sha256 = (b: Buffer) => createHash("sha256").update(b).digest("hex");

async function outputIncludes(output: () => string, text: string, exited: Promise<unknown>): Promise<void> {
  await exited;
  expect(output()).toContain(text);
}

const nats = useNatsServer();

describe("an app's input queue (real PTY)", () => {
  it("a 1 MiB paste into a program not reading stdin leaves the event loop free; once it reads it gets every byte in order", async () => {
    const size = 1024 * 1024;
    const { proc, output, ready } = startStoppedReader(size);
    await ready;
    const bytes = payload(size);
    // In 64 KiB pieces, as the gateway's window delivers them.
    for (let at = 0; at < size; at += 64 * 1024) proc.input.push(bytes.subarray(at, at + 64 * 1024));
    // Reaching the next turn of the event loop at all is the point: the old write spun inside libuv.
    await new Promise((r) => setImmediate(r));
    expect(proc.input.queuedBytes).toBeGreaterThan(0);
    const drained = new Promise<void>((resolve) => proc.input.whenBelow(0, resolve));
    proc.thaw();
    await drained;
    await outputIncludes(output, sha256(bytes), proc.exited);
  });

  it("the same for an app without a PTY (tty: false)", async () => {
    const size = 1024 * 1024;
    const { proc, output, ready } = startStoppedReader(size, false);
    await ready;
    const bytes = payload(size);
    for (let at = 0; at < size; at += 64 * 1024) proc.input.push(bytes.subarray(at, at + 64 * 1024));
    await new Promise((r) => setImmediate(r));
    proc.thaw();
    await outputIncludes(output, sha256(bytes), proc.exited);
  });

  it("whenBelow is released when the program exits with input still queued (nobody waits forever)", async () => {
    const { proc, ready } = startStoppedReader(10);
    await ready;
    proc.input.push(payload(512 * 1024));
    await new Promise((r) => setImmediate(r));
    const released = new Promise<void>((resolve) => proc.input.whenBelow(0, resolve));
    await proc.terminate(100);
    await released;
    expect(proc.input.closed).toBe(true);
    expect(proc.input.push(Buffer.from("x"))).toBe(false);
  });
});

describe("credit on the input subject (real nats-server, real PTY)", () => {

  it("a credit request waits while the app's queue is over its low-water mark, and is granted once the program reads", async () => {
    const size = 4 * INPUT_LOW_WATER_BYTES;
    const { proc, output, ready } = startStoppedReader(size);
    await ready;
    const metrics = createRunnerMetrics();
    const sub = subscribeInput({
      nc: nats.nc,
      poolId: "default",
      runnerId: "r1",
      sessionId: "s1",
      admission: { open: () => true, epoch: () => 0, onConfirmed: () => () => undefined },
      gate: new ControllerGate(),
      app: (name) => (name === "main" ? proc : undefined),
      metrics,
      log: silentLogger(),
      creditHoldMs: 50,
    });
    const subject = Subjects.input("default", "r1", "s1", "main");
    const h = (kind: string) => {
      const x = headers();
      x.set(Headers.inputKind, kind);
      x.set(Headers.controllerGeneration, "1");
      return x;
    };
    const credit = async () => InputCredit.parse((await nats.nc.request(subject, new Uint8Array(0), { headers: h("credit"), timeout: 5_000 })).json());
    const bytes = payload(size);
    for (let at = 0; at < size; at += 16 * 1024) nats.nc.publish(subject, bytes.subarray(at, at + 16 * 1024), { headers: h("data") });
    // The program is stopped: the queue stays over the mark and the answer says so.
    expect(await credit()).toEqual({ ready: false });
    proc.thaw();
    // Asked again, as the gateway does, until granted.
    while (!(await credit()).ready) {
      // not drained yet
    }
    await outputIncludes(output, sha256(bytes), proc.exited);
    // A credit request without a reply subject is bad input: counted, nothing else.
    nats.nc.publish(subject, new Uint8Array(0), { headers: h("credit") });
    await nats.nc.flush();
    await sub.drain();
    expect((await metrics.invalidMessages.get()).values.reduce((n, v) => n + v.value, 0)).toBe(1);
    expect((await metrics.inputOverflow.get()).values[0]?.value ?? 0).toBe(0);
  });
});

/** An admission the test opens, closes and re-registers by hand (agent.ts drives the real one from its fence checks). */
function manualAdmission(): InputAdmission & { close(): void; confirm(): void; reregister(): void } {
  let open = true;
  let epoch = 0;
  const listeners = new Set<() => void>();
  return {
    open: () => open,
    epoch: () => epoch,
    onConfirmed: (listener) => {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
    close: () => {
      open = false;
    },
    confirm: () => {
      open = true;
      for (const l of [...listeners]) l();
    },
    reregister: () => {
      epoch += 1;
      open = true;
      for (const l of [...listeners]) l();
    },
  };
}

describe("input while the registration is unconfirmed (real nats-server, real PTY)", () => {
  function harness(sessionId: string, proc: AppProcess, admission: InputAdmission) {
    const metrics = createRunnerMetrics();
    const sub = subscribeInput({ nc: nats.nc, poolId: "default", runnerId: "r1", sessionId, admission, gate: new ControllerGate(), app: (name) => (name === "main" ? proc : undefined), metrics, log: silentLogger() });
    const subject = Subjects.input("default", "r1", sessionId, "main");
    const h = (kind: string) => {
      const x = headers();
      x.set(Headers.inputKind, kind);
      x.set(Headers.controllerGeneration, "1");
      return x;
    };
    const send = (bytes: Buffer) => nats.nc.publish(subject, bytes, { headers: h("data") });
    const credit = () => nats.nc.request(subject, new Uint8Array(0), { headers: h("credit"), timeout: 30_000 }).then((m) => InputCredit.parse(m.json()));
    return { metrics, sub, send, credit };
  }

  it("is held in order and reaches the app once the same registration is confirmed again", async () => {
    const size = 20_000;
    const { proc, output, ready } = startReader(size);
    await ready;
    const admission = manualAdmission();
    const { metrics, sub, send, credit } = harness("s-held", proc, admission);
    const bytes = payload(size);
    send(bytes.subarray(0, 5_000));
    await nats.nc.flush();
    admission.close();
    for (let at = 5_000; at < size; at += 10) send(bytes.subarray(at, at + 10));
    // Asked while unconfirmed: answered only after the confirmation, behind the input it covers.
    const granted = credit();
    await nats.nc.flush();
    admission.confirm();
    expect(await granted).toEqual({ ready: true });
    await outputIncludes(output, sha256(bytes), proc.exited);
    await sub.drain();
    expect((await metrics.staleInput.get()).values[0]?.value ?? 0).toBe(0);
  });

  it("is dropped (counted stale) when the runner registered again meanwhile, and a waiting credit request is released", async () => {
    const { proc, output, ready } = startReader(6);
    await ready;
    const admission = manualAdmission();
    const { metrics, sub, send, credit } = harness("s-moved", proc, admission);
    admission.close();
    send(Buffer.from("stale!"));
    const released = credit();
    await nats.nc.flush();
    admission.reregister();
    expect(await released).toEqual({ ready: true });
    // Input after the new registration reaches the app; the stale bytes never do.
    send(Buffer.from("fresh!"));
    await outputIncludes(output, sha256(Buffer.from("fresh!")), proc.exited);
    await sub.drain();
    expect((await metrics.staleInput.get()).values[0]?.value).toBe(2);
  });
});
