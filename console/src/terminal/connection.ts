/**
 * One terminal attachment across reconnects (docs/terminal.md): a fresh
 * single-use attach ticket for every socket (the token is never in a URL),
 * `since=screen` the first time, then `since=<cursor of the last output
 * frame>` after a dropped connection, so no byte is lost or shown twice.
 * Output frames are binary (8-byte cursor, then bytes); control frames are
 * JSON text checked against the contract's ServerFrame.
 */
import { CLOSE_REVOKED, CLOSE_SLOW_CLIENT, CLOSE_SUPERSEDED, ClientFrame, decodeOutputFrame, fillPath, HttpApi, ServerFrame, type AttachMode } from "@paddock/contracts";
import { ApiError, call } from "../api.ts";

export type ConnectionState =
  | { kind: "connecting" }
  | { kind: "connected"; app: string; mode: AttachMode }
  | { kind: "reconnecting"; inMs: number; reason: string }
  | { kind: "ended"; code: number | null }
  | { kind: "superseded" }
  | { kind: "closed"; reason: string };

export interface ConnectionEvents {
  /** Bytes for the terminal; `reset`: the screen starts over (a snapshot after the log was truncated). */
  output(bytes: Uint8Array, reset: boolean): void;
  state(s: ConnectionState): void;
  /** A non-fatal message from the gateway (an `error` frame, a `status` change). */
  notice(text: string): void;
  /** The socket is open and said hello: send the current size (controller). */
  opened(): void;
}

const BACKOFF_FIRST_MS = 250;
const BACKOFF_MAX_MS = 10_000;
/** Keys typed while reconnecting wait for the next socket, up to this much. */
const MAX_PENDING_INPUT_BYTES = 64 * 1024;

export class TerminalConnection {
  private ws: WebSocket | undefined;
  /** Cursor of the last output frame written (undefined: nothing yet, attach with since=screen). */
  private cursor: number | undefined;
  /** The next binary frame is a screen snapshot (first attach, or after `truncated`). */
  private expectSnapshot = true;
  private resetNext = false;
  private done = false;
  private attempt = 0;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private pending: Uint8Array[] = [];
  private pendingBytes = 0;
  private helloSeen = false;

  constructor(
    private readonly sessionId: string,
    private readonly mode: AttachMode,
    private readonly app: string | undefined,
    private readonly events: ConnectionEvents,
  ) {}

  get lastCursor(): number | undefined {
    return this.cursor;
  }

  start(): void {
    void this.connect();
  }

  /** Stdin bytes (controller): sent as a binary frame, or held while reconnecting. */
  sendInput(bytes: Uint8Array): void {
    if (this.done || this.mode !== "controller") return;
    if (this.ws?.readyState === WebSocket.OPEN && this.helloSeen) {
      this.ws.send(bytes);
      return;
    }
    if (this.pendingBytes + bytes.byteLength > MAX_PENDING_INPUT_BYTES) return;
    this.pending.push(bytes);
    this.pendingBytes += bytes.byteLength;
  }

  sendResize(cols: number, rows: number): void {
    if (this.done || this.mode !== "controller" || this.ws?.readyState !== WebSocket.OPEN) return;
    const frame: ClientFrame = { type: "resize", cols, rows };
    this.ws.send(JSON.stringify(ClientFrame.parse(frame)));
  }

  /** Closes for good (no reconnect). */
  close(): void {
    this.finish({ kind: "closed", reason: "closed" });
  }

  private finish(s: ConnectionState): void {
    if (this.done) return;
    this.done = true;
    clearTimeout(this.timer);
    const ws = this.ws;
    this.ws = undefined;
    if (ws && ws.readyState <= WebSocket.OPEN) ws.close(1000, "client closed");
    this.events.state(s);
  }

  private async connect(): Promise<void> {
    if (this.done) return;
    this.events.state({ kind: "connecting" });
    let ticket: string;
    try {
      ticket = (await call(HttpApi.createAttachTicket, { params: { id: this.sessionId }, body: { mode: this.mode } })).ticket;
    } catch (err) {
      // Gone, not allowed or logged out: retrying cannot help.
      if (err instanceof ApiError && ["not_found", "forbidden", "unauthenticated", "invalid"].includes(err.code)) {
        return this.finish({ kind: "closed", reason: err.message });
      }
      return this.retry(err instanceof Error ? err.message : "attach ticket failed");
    }
    if (this.done) return;
    const url = new URL(fillPath(HttpApi.attachTerminal.path, { id: this.sessionId }), location.href);
    url.protocol = location.protocol === "https:" ? "wss:" : "ws:";
    url.searchParams.set("ticket", ticket);
    url.searchParams.set("mode", this.mode);
    url.searchParams.set("since", this.cursor === undefined ? "screen" : String(this.cursor));
    if (this.app !== undefined) url.searchParams.set("app", this.app);
    this.expectSnapshot = this.cursor === undefined;
    this.helloSeen = false;
    const ws = new WebSocket(url);
    ws.binaryType = "arraybuffer";
    this.ws = ws;
    ws.onmessage = (ev: MessageEvent<ArrayBuffer | string>) => {
      if (this.ws !== ws) return;
      if (typeof ev.data === "string") this.onControl(ev.data);
      else this.onOutput(new Uint8Array(ev.data));
    };
    ws.onclose = (ev) => {
      if (this.ws !== ws) return;
      this.ws = undefined;
      this.onClose(ev.code, ev.reason);
    };
  }

  private onOutput(frame: Uint8Array): void {
    let decoded: ReturnType<typeof decodeOutputFrame>;
    try {
      decoded = decodeOutputFrame(frame);
    } catch {
      return;
    }
    if (this.expectSnapshot) {
      this.expectSnapshot = false;
    } else if (this.cursor !== undefined && decoded.cursor <= this.cursor) {
      return; // already written: never twice
    }
    this.cursor = decoded.cursor;
    const reset = this.resetNext;
    this.resetNext = false;
    this.events.output(decoded.bytes, reset);
  }

  private onControl(text: string): void {
    let parsed: ReturnType<typeof ServerFrame.safeParse>;
    try {
      parsed = ServerFrame.safeParse(JSON.parse(text));
    } catch {
      return;
    }
    if (!parsed.success) return;
    const f = parsed.data;
    switch (f.type) {
      case "hello":
        this.helloSeen = true;
        this.attempt = 0;
        this.events.state({ kind: "connected", app: f.app, mode: f.mode });
        this.events.opened();
        this.flushPending();
        return;
      case "truncated":
        // The chunks after our cursor are gone: a snapshot of the screen follows; start the screen over.
        this.expectSnapshot = true;
        this.resetNext = true;
        this.events.notice(`output before ${f.from} is no longer kept: showing the screen as it is`);
        return;
      case "superseded":
        this.finish({ kind: "superseded" });
        return;
      case "exit":
        this.finish({ kind: "ended", code: f.code });
        return;
      case "status":
        this.events.notice(`session ${f.state}`);
        return;
      case "error":
        this.events.notice(f.message ?? f.code);
        return;
    }
  }

  private flushPending(): void {
    const ws = this.ws;
    if (!ws || this.mode !== "controller") return;
    for (const bytes of this.pending) ws.send(bytes);
    this.pending = [];
    this.pendingBytes = 0;
  }

  private onClose(code: number, reason: string): void {
    if (this.done) return;
    if (code === CLOSE_SUPERSEDED) return this.finish({ kind: "superseded" });
    if (code === CLOSE_REVOKED) return this.finish({ kind: "closed", reason: reason || "the token was revoked or expired" });
    if (code === 4000) return this.finish({ kind: "ended", code: null });
    // 1006 (dropped), 1001 (gateway stopping), 1011, 4008 (slow: resume from the cursor): attach again.
    this.retry(code === CLOSE_SLOW_CLIENT ? "catching up" : reason || `connection lost (${code})`, code === CLOSE_SLOW_CLIENT);
  }

  private retry(reason: string, now = false): void {
    if (this.done) return;
    const inMs = now ? 0 : Math.min(BACKOFF_MAX_MS, BACKOFF_FIRST_MS * 2 ** this.attempt);
    this.attempt++;
    this.events.state({ kind: "reconnecting", inMs, reason });
    clearTimeout(this.timer);
    this.timer = setTimeout(() => void this.connect(), inMs);
  }
}
