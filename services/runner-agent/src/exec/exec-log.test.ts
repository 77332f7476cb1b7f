import { beforeAll, describe, expect, it } from "vitest";
import { DeliverPolicy, jetstream, jetstreamManager } from "@nats-io/jetstream";
import { provision } from "@paddock/bus";
import { EXEC_CHUNK_MAX_BYTES, Headers, Streams, Subjects } from "@paddock/contracts";
import { useNatsServer } from "@paddock/testing/vitest";
import { ExecLog } from "./exec-log.ts";

const nats = useNatsServer();
let n = 0;

beforeAll(async () => {
  await provision(nats.nc, { replicas: 1 });
});

/** Everything stored on the exec's subject: bytes per stream, and the exit body when there is one. */
async function stored(subject: string): Promise<{ stdout: number; stderr: number; order: string; exit?: unknown; messages: number }> {
  const jsm = await jetstreamManager(nats.nc);
  const info = await jsm.streams.info(Streams.exec, { subjects_filter: subject });
  const count = info.state.subjects?.[subject] ?? 0;
  const out = { stdout: 0, stderr: 0, order: "", messages: count } as { stdout: number; stderr: number; order: string; exit?: unknown; messages: number };
  if (count === 0) return out;
  const consumer = await jetstream(nats.nc).consumers.get(Streams.exec, { filter_subjects: [subject], deliver_policy: DeliverPolicy.All });
  let left = count;
  for await (const m of await consumer.consume()) {
    if (m.headers?.get(Headers.execExit)) out.exit = m.json();
    else {
      const stream = m.headers?.get(Headers.stream) as "stdout" | "stderr";
      out[stream] += m.data.byteLength;
      out.order += m.data.length > 0 ? String.fromCharCode(m.data[0] as number) : "";
    }
    if (--left === 0) break;
  }
  return out;
}

function newLog(opts: { attached: boolean; windowBytes?: number; onPaused?: (paused: boolean) => void }) {
  const subject = Subjects.exec("p", "r", "s1", `e${++n}`);
  const pauses: boolean[] = [];
  let blocked: () => void = () => undefined;
  const whenBlocked = new Promise<void>((resolve) => (blocked = resolve));
  const log = new ExecLog({
    js: jetstream(nats.nc),
    subject,
    idPrefix: `s1.e${n}.1`,
    attached: opts.attached,
    ...(opts.windowBytes !== undefined ? { windowBytes: opts.windowBytes } : {}),
    setPaused: (paused) => {
      pauses.push(paused);
      opts.onPaused?.(paused);
    },
    onWaitingForCredit: () => blocked(),
  });
  return { log, subject, pauses, whenBlocked };
}

describe("ExecLog", () => {
  it("keeps the streams apart and in order, then writes the exit last", async () => {
    const { log, subject } = newLog({ attached: false });
    log.append(Buffer.from("aaa"), "stdout");
    log.append(Buffer.from("bbb"), "stderr");
    log.append(Buffer.from("ccc"), "stdout");
    await log.finish({ exitCode: 2, signal: null, durationMs: 5, timedOut: false });
    const got = await stored(subject);
    expect(got).toMatchObject({ stdout: 6, stderr: 3, order: "abc", exit: { exitCode: 2, signal: null, durationMs: 5, timedOut: false } });
  });

  it("holds an attached reader's window: stops a window ahead of its credit, pauses the pipes, and goes on when credited", async () => {
    const windowBytes = 4 * EXEC_CHUNK_MAX_BYTES;
    const { log, subject, pauses, whenBlocked } = newLog({ attached: true, windowBytes });
    const total = 3 * windowBytes;
    for (let at = 0; at < total; at += 8 * 1024) log.append(Buffer.alloc(8 * 1024, 0x61), "stdout");
    await whenBlocked;
    // One window published (the chunk that crossed it whole), nothing lost: the rest waits here, and the pipes are paused.
    const published = (await stored(subject)).stdout;
    expect(published).toBe(log.publishedBytes);
    expect(published).toBeGreaterThanOrEqual(windowBytes);
    expect(published).toBeLessThan(windowBytes + EXEC_CHUNK_MAX_BYTES);
    expect(pauses.at(-1)).toBe(true);
    log.credit(total);
    await log.finish({ exitCode: 0, signal: null, durationMs: 1, timedOut: false });
    const got = await stored(subject);
    expect(got.stdout).toBe(total);
    expect(got.exit).toMatchObject({ exitCode: 0 });
    expect(pauses.at(-1)).toBe(false);
  });

  it("ignores a credit older than one already granted", async () => {
    const windowBytes = 2 * EXEC_CHUNK_MAX_BYTES;
    const { log, subject, whenBlocked } = newLog({ attached: true, windowBytes });
    for (let i = 0; i < 8; i++) log.append(Buffer.alloc(EXEC_CHUNK_MAX_BYTES, 0x62), "stdout");
    await whenBlocked;
    log.credit(windowBytes);
    log.credit(1);
    log.credit(8 * EXEC_CHUNK_MAX_BYTES);
    await log.finish({ exitCode: 0, signal: null, durationMs: 1, timedOut: false });
    expect((await stored(subject)).stdout).toBe(8 * EXEC_CHUNK_MAX_BYTES);
  });

  it("publishes nothing more once aborted, not even the exit", async () => {
    const { log, subject, whenBlocked } = newLog({ attached: true, windowBytes: EXEC_CHUNK_MAX_BYTES });
    for (let i = 0; i < 4; i++) log.append(Buffer.alloc(EXEC_CHUNK_MAX_BYTES, 0x63), "stdout");
    await whenBlocked;
    log.abort();
    await log.finish({ exitCode: 0, signal: null, durationMs: 1, timedOut: false });
    const got = await stored(subject);
    expect(got.stdout).toBe(log.publishedBytes);
    expect(got.stdout).toBeLessThan(2 * EXEC_CHUNK_MAX_BYTES);
    expect(got.exit).toBeUndefined();
  });
});
