import WebSocket from "ws";
import { DeliverPolicy, jetstream } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/transport-node";
import { Buckets, decodeOutputFrame, kvStreamName, sessionKey, type Session } from "@paddock/contracts";

export interface Answer {
  status: number;
  body: unknown;
  headers: Headers;
}

/** One HTTP call to the public API. Network failures reject (a killed gateway). */
export async function api(url: string, token: string | undefined, method: string, path: string, body?: unknown, timeoutMs = 15_000): Promise<Answer> {
  const res = await fetch(`${url}${path}`, {
    method,
    headers: {
      ...(token !== undefined ? { authorization: `Bearer ${token}` } : {}),
      ...(body !== undefined ? { "content-type": "application/json" } : {}),
    },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    signal: AbortSignal.timeout(timeoutMs),
  });
  const text = await res.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    // not JSON
  }
  return { status: res.status, body: parsed, headers: res.headers };
}

export interface OutputFrame {
  cursor: number;
  bytes: number;
  text: string;
  at: number;
}

/** A terminal WebSocket (public protocol): output frames with their cursors, text frames, the close code. */
export class Terminal {
  readonly output: OutputFrame[] = [];
  readonly texts: Array<{ frame: Record<string, unknown>; at: number }> = [];
  closeCode: number | undefined;
  readonly closed: Promise<number>;
  private waiters: Array<() => void> = [];

  private constructor(readonly ws: WebSocket) {
    ws.on("message", (data: Buffer, isBinary: boolean) => {
      if (isBinary) {
        const { cursor, bytes } = decodeOutputFrame(data);
        this.output.push({ cursor, bytes: bytes.byteLength, text: Buffer.from(bytes).toString("latin1"), at: Date.now() });
      } else {
        let frame: Record<string, unknown> = {};
        try {
          frame = JSON.parse(data.toString()) as Record<string, unknown>;
        } catch {
          frame = { type: "unparsable" };
        }
        this.texts.push({ frame, at: Date.now() });
      }
      this.wake();
    });
    ws.on("error", () => undefined);
    this.closed = new Promise((resolve) =>
      ws.on("close", (code) => {
        this.closeCode = code;
        this.wake();
        resolve(code);
      }),
    );
  }

  private wake(): void {
    for (const w of this.waiters.splice(0)) w();
  }

  /** Opens a socket; rejects with the refused upgrade's status. */
  static open(url: string, token: string, sessionId: string, query: string): Promise<Terminal> {
    const ws = new WebSocket(`${url.replace(/^http/, "ws")}/v1/sessions/${sessionId}/terminal?${query}`, { headers: { authorization: `Bearer ${token}` } });
    return new Promise((resolve, reject) => {
      ws.once("open", () => resolve(new Terminal(ws)));
      ws.once("unexpected-response", (_req, res) => {
        reject(new UpgradeRefused(res.statusCode ?? 0));
        ws.terminate();
      });
      ws.once("error", reject);
    });
  }

  text(): string {
    return this.output.map((f) => f.text).join("");
  }

  hello(): Record<string, unknown> | undefined {
    return this.texts.find((t) => t.frame.type === "hello")?.frame;
  }

  /** Resolves once pred holds (re-checked on every frame); false on close or timeout. */
  async until(pred: (t: Terminal) => boolean, timeoutMs: number): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    while (!pred(this)) {
      if (this.closeCode !== undefined || Date.now() > deadline) return pred(this);
      await new Promise<void>((r) => {
        const timer = setTimeout(r, Math.max(1, deadline - Date.now()));
        this.waiters.push(() => {
          clearTimeout(timer);
          r();
        });
      });
    }
    return true;
  }

  send(data: Buffer | string, binary: boolean): void {
    if (this.ws.readyState === WebSocket.OPEN) this.ws.send(data, { binary });
  }

  close(): void {
    if (this.ws.readyState === WebSocket.OPEN || this.ws.readyState === WebSocket.CONNECTING) this.ws.close();
  }
}

export class UpgradeRefused extends Error {
  constructor(readonly status: number) {
    super(`upgrade refused: ${status}`);
  }
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Polls cond every intervalMs until it holds or the deadline passes; answers whether it held. */
export async function waitFor(cond: () => boolean | Promise<boolean>, timeoutMs: number, intervalMs = 100): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await cond()) return true;
    if (Date.now() > deadline) return false;
    await sleep(intervalMs);
  }
}

/** Resolves with the record once pred holds (KV watch of the key); undefined on timeout. */
export async function untilRecord(nc: NatsConnection, workspaceId: string, id: string, pred: (s: Session) => boolean, timeoutMs: number): Promise<Session | undefined> {
  const kv = await new Kvm(nc).open(Buckets.sessions);
  const w = await kv.watch({ key: sessionKey(workspaceId, id) });
  const timer = setTimeout(() => w.stop(), timeoutMs);
  try {
    for await (const e of w) {
      if (e.operation === "PUT" && pred(e.json<Session>())) return e.json<Session>();
    }
    return undefined;
  } finally {
    clearTimeout(timer);
    w.stop();
  }
}

/** JSON.parse of stored bytes; undefined when they are not JSON (the bad-input scenario stores such messages). */
export function parseJson(data: Uint8Array): unknown {
  try {
    return JSON.parse(Buffer.from(data).toString("utf8")) as unknown;
  } catch {
    return undefined;
  }
}

export interface StoredMessage {
  subject: string;
  seq: number;
  /** Server timestamp, ms. */
  time: number;
  headers: Record<string, string>;
  data: Uint8Array;
}

/**
 * Every message of a stream (optionally filtered) as stored now, read once
 * with an ordered consumer in bounded fetches.
 */
export async function readStream(nc: NatsConnection, stream: string, filter?: string): Promise<StoredMessage[]> {
  const js = jetstream(nc);
  const consumer = await js.consumers.get(stream, { deliver_policy: DeliverPolicy.All, ...(filter ? { filter_subjects: [filter] } : {}) });
  let info = await consumer.info();
  // In a cluster a pull is answered by the consumer's leader: fetch once the server names one.
  for (const deadline = Date.now() + 30_000; info.cluster !== undefined && !info.cluster.leader; info = await consumer.info()) {
    if (Date.now() > deadline) throw new Error(`consumer on ${stream} has no leader after 30 s`);
    await sleep(100);
  }
  let pending = info.num_pending;
  const out: StoredMessage[] = [];
  while (pending > 0) {
    const batch = await consumer.fetch({ max_messages: Math.min(pending, 1000), expires: 5_000 });
    let got = 0;
    for await (const m of batch) {
      const headers: Record<string, string> = {};
      for (const [k, v] of m.headers ?? []) headers[k] = v[0] ?? "";
      out.push({ subject: m.subject, seq: m.seq, time: Math.floor(Number(m.info.timestampNanos) / 1e6), headers, data: m.data });
      got += 1;
    }
    if (got === 0) break;
    pending -= got;
  }
  return out;
}

/** Every PUT revision of a KV bucket, in stream order: key, revision and parsed value. */
export async function kvRevisions<T>(nc: NatsConnection, bucket: string): Promise<Array<{ key: string; revision: number; time: number; value: T | undefined; op: string }>> {
  const prefix = `$KV.${bucket}.`;
  return (await readStream(nc, kvStreamName(bucket))).map((m) => {
    const op = m.headers["KV-Operation"] ?? "PUT";
    const value = op === "PUT" ? (parseJson(m.data) as T | undefined) : undefined;
    return { key: m.subject.slice(prefix.length), revision: m.seq, time: m.time, value, op };
  });
}
