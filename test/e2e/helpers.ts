import { jetstream, DeliverPolicy } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import WebSocket from "ws";
import { AuditEvent, decodeOutputFrame, ServerFrame, type Session } from "@paddock/contracts";

export interface ApiAnswer {
  status: number;
  body: unknown;
}

export async function api(url: string, token: string | undefined, method: string, path: string, body?: unknown, raw?: string): Promise<ApiAnswer> {
  const res = await fetch(`${url}${path}`, {
    method,
    headers: {
      ...(token !== undefined ? { authorization: `Bearer ${token}` } : {}),
      ...(body !== undefined || raw !== undefined ? { "content-type": "application/json" } : {}),
    },
    ...(raw !== undefined ? { body: raw } : body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  const text = await res.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    // not JSON: keep the text
  }
  return { status: res.status, body: parsed };
}

export type Frame = { kind: "text"; frame: ServerFrame } | { kind: "output"; cursor: number; text: string };

/** A terminal WebSocket that queues frames and lets a test wait for one. */
export class Terminal {
  readonly frames: Frame[] = [];
  private waiters: Array<() => void> = [];
  closeCode: number | undefined;
  readonly closed: Promise<number>;

  constructor(readonly ws: WebSocket) {
    ws.on("message", (data: Buffer, isBinary: boolean) => {
      if (isBinary) {
        const { cursor, bytes } = decodeOutputFrame(data);
        this.frames.push({ kind: "output", cursor, text: Buffer.from(bytes).toString() });
      } else {
        this.frames.push({ kind: "text", frame: ServerFrame.parse(JSON.parse(data.toString())) });
      }
      for (const w of this.waiters.splice(0)) w();
    });
    this.closed = new Promise((resolve) =>
      ws.on("close", (code) => {
        this.closeCode = code;
        for (const w of this.waiters.splice(0)) w();
        resolve(code);
      }),
    );
  }

  static open(url: string, token: string, sessionId: string, query: string): Promise<Terminal> {
    const ws = new WebSocket(`${url.replace(/^http/, "ws")}/v1/sessions/${sessionId}/terminal?${query}`, {
      headers: { authorization: `Bearer ${token}` },
    });
    return new Promise((resolve, reject) => {
      ws.once("open", () => resolve(new Terminal(ws)));
      ws.once("unexpected-response", (_req, res) => reject(new Error(`upgrade refused: ${res.statusCode}`)));
      ws.once("error", reject);
    });
  }

  output(): string {
    return this.frames.map((f) => (f.kind === "output" ? f.text : "")).join("");
  }

  /** Resolves once pred holds over the frames received so far (re-checked on every frame). */
  async until(pred: (t: Terminal) => boolean): Promise<void> {
    while (!pred(this)) {
      if (this.closeCode !== undefined) throw new Error(`socket closed (${this.closeCode}) before the condition held; got ${JSON.stringify(this.frames)}`);
      await new Promise<void>((r) => this.waiters.push(r));
    }
  }

  textFrames(): ServerFrame[] {
    return this.frames.flatMap((f) => (f.kind === "text" ? [f.frame] : []));
  }
}

/** Resolves with the audit events of one session once `count` of them are in AUDIT (no polling). */
export async function waitForAuditEvents(nc: NatsConnection, workspaceId: string, sessionId: string, done: (events: AuditEvent[]) => boolean): Promise<AuditEvent[]> {
  const consumer = await jetstream(nc).consumers.get("AUDIT", {
    filter_subjects: [`paddock.audit.${workspaceId}.session.${sessionId}`],
    deliver_policy: DeliverPolicy.All,
  });
  const events: AuditEvent[] = [];
  const messages = await consumer.consume();
  for await (const m of messages) {
    events.push(AuditEvent.parse(m.json()));
    if (done(events)) break;
  }
  await messages.close();
  return events;
}

export function sessionOf(answer: ApiAnswer): Session {
  return answer.body as Session;
}

/** What an e2e file asks of its stack through the public API; `stackOf` is read at each call (the stack starts in beforeAll). */
export function stackClient(stackOf: () => { url: string; token: string }) {
  const post = (path: string, body?: unknown) => api(stackOf().url, stackOf().token, "POST", path, body);
  const getSession = async (id: string) => sessionOf(await api(stackOf().url, stackOf().token, "GET", `/v1/sessions/${id}`));
  /** Creates a session (201 asserted) and answers its record. */
  async function createSession(body: Record<string, unknown>): Promise<Session> {
    const res = await post("/v1/sessions", body);
    if (res.status !== 201) throw new Error(`create answered ${String(res.status)}: ${JSON.stringify(res.body)}`);
    return sessionOf(res);
  }
  /** Attaches over a real WebSocket and resolves with the output once pred holds. */
  async function outputOf(id: string, pred: (text: string) => boolean): Promise<string> {
    const term = await Terminal.open(stackOf().url, stackOf().token, id, "since=all");
    await term.until((t) => pred(t.output()));
    term.ws.close();
    return term.output();
  }
  return { post, getSession, createSession, outputOf };
}
