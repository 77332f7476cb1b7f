/**
 * A session's terminal as an async iterator: output chunks with their
 * cursors, the app's exit, gaps the log's retention cut. Attached with a
 * single-use ticket (no token in a URL, as browsers need); a dropped socket
 * is reattached from the last cursor (nothing lost, nothing repeated), and a
 * consumer that falls behind has its socket closed at a bound and reattached
 * from its cursor once it catches up, so memory stays bounded.
 */
import { CLOSE_ENDED, CLOSE_REVOKED, CLOSE_SUPERSEDED, decodeOutputFrame, HttpApi, ServerFrame, type AttachMode } from "@paddock/contracts";
import { apiError, type PaddockApiError } from "./errors.ts";
import type { Transport } from "./transport.ts";

/** What the SDK needs of a WebSocket: the browser's, or `ws`'s in Node 20. */
export interface SocketLike {
  binaryType: string;
  readonly readyState: number;
  onopen: ((ev: unknown) => void) | null;
  onmessage: ((ev: { data: unknown }) => void) | null;
  onclose: ((ev: { code: number; reason: string }) => void) | null;
  onerror: ((ev: unknown) => void) | null;
  send(data: string | Uint8Array): void;
  close(code?: number, reason?: string): void;
}
export type SocketConstructor = new (url: string) => SocketLike;

export type TerminalItem =
  | { readonly type: "output"; readonly cursor: number; readonly bytes: Uint8Array; /** The screen as it is (since=screen): draw it on a clean terminal. */ readonly reset: boolean }
  | { readonly type: "exit"; readonly app: string; readonly code: number | null }
  | { readonly type: "truncated"; readonly from: number };

export interface AttachOptions {
  readonly mode?: AttachMode;
  readonly app?: string;
  /** Where the first attach starts: the screen as it is (default), the whole retained log, or after a cursor. */
  readonly since?: "screen" | "all" | number;
  readonly signal?: AbortSignal;
  /** The WebSocket to use (default: the platform's). */
  readonly WebSocket?: SocketConstructor;
  /** Output bytes held for a slow consumer before its socket is closed and later resumed (default 8 MiB). */
  readonly maxBufferedBytes?: number;
}

const MAX_OUTBOX_BYTES = 1024 * 1024;
const RETRYABLE_CLOSE = (code: number) => code !== CLOSE_ENDED && code !== CLOSE_SUPERSEDED && code !== CLOSE_REVOKED;

export class Terminal implements AsyncIterable<TerminalItem> {
  /** The cursor of the last output delivered (undefined before any). */
  cursor: number | undefined;
  private ws: SocketLike | undefined;
  private readonly queue: TerminalItem[] = [];
  private queuedBytes = 0;
  private waiter: (() => void) | undefined;
  private failure: PaddockApiError | undefined;
  private ended = false;
  private parked = false;
  private snapshotNext: boolean;
  private attempt = 0;
  /** Frames sent while no socket is open (connecting, reattaching): sent in order once one is. */
  private readonly outbox: Array<string | Uint8Array> = [];
  private outboxBytes = 0;

  constructor(
    private readonly t: Transport,
    private readonly sessionId: string,
    private readonly opts: AttachOptions = {},
  ) {
    if (typeof opts.since === "number") this.cursor = opts.since;
    this.snapshotNext = (opts.since ?? "screen") === "screen";
    opts.signal?.addEventListener("abort", () => this.close(), { once: true });
  }

  /** Starts the first attach; resolves once the socket is asked for (errors of the ticket are thrown). */
  async open(): Promise<this> {
    await this.connect();
    return this;
  }

  /** Input for the app (a controller's; a viewer's is ignored by the gateway). */
  send(data: string | Uint8Array): void {
    this.deliver(typeof data === "string" ? new TextEncoder().encode(data) : data);
  }

  resize(cols: number, rows: number): void {
    this.deliver(JSON.stringify({ type: "resize", cols, rows }));
  }

  /** Sends now when a socket is open; else holds the frame (bounded) for the next one. */
  private deliver(frame: string | Uint8Array): void {
    if (this.ended) throw apiError("conflict", "the terminal is closed", 0);
    if (this.ws?.readyState === 1 && this.outbox.length === 0) return this.ws.send(frame);
    const size = typeof frame === "string" ? frame.length : frame.byteLength;
    if (this.outboxBytes + size > MAX_OUTBOX_BYTES) throw apiError("too_large", `more than ${MAX_OUTBOX_BYTES} bytes of input wait for the terminal to reconnect`, 0);
    this.outbox.push(frame);
    this.outboxBytes += size;
  }

  private flush(ws: SocketLike): void {
    for (const frame of this.outbox.splice(0)) ws.send(frame);
    this.outboxBytes = 0;
  }

  close(): void {
    this.ended = true;
    this.ws?.close(1000, "client closed");
    this.ws = undefined;
    this.wake();
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<TerminalItem> {
    try {
      for (;;) {
        const item = this.queue.shift();
        if (item) {
          if (item.type === "output") this.queuedBytes -= item.bytes.byteLength;
          if (this.parked && this.queuedBytes <= this.maxBytes() / 2) void this.resume();
          yield item;
          continue;
        }
        if (this.failure) throw this.failure;
        if (this.ended) return;
        await new Promise<void>((resolve) => (this.waiter = resolve));
      }
    } finally {
      this.close();
    }
  }

  private maxBytes(): number {
    return this.opts.maxBufferedBytes ?? 8 * 1024 * 1024;
  }

  private wake(): void {
    const w = this.waiter;
    this.waiter = undefined;
    w?.();
  }

  private async connect(): Promise<void> {
    const Ctor = this.opts.WebSocket ?? (globalThis as unknown as { WebSocket?: SocketConstructor }).WebSocket;
    if (!Ctor) throw apiError("internal", "no WebSocket in this runtime: pass one as the WebSocket option", 0);
    const mode = this.opts.mode ?? "viewer";
    const { ticket } = await this.t.call(HttpApi.createAttachTicket, { params: { id: this.sessionId }, body: { mode }, signal: this.opts.signal }, { retry: true });
    if (this.ended) return;
    const since = this.cursor !== undefined ? String(this.cursor) : this.opts.since === "all" ? "all" : "screen";
    const url = this.t.url(HttpApi.attachTerminal, { params: { id: this.sessionId }, query: { ticket, mode, since, app: this.opts.app } });
    url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
    const ws = new Ctor(url.toString());
    ws.binaryType = "arraybuffer";
    this.ws = ws;
    ws.onmessage = (ev) => {
      if (this.ws === ws) this.onMessage(ev.data);
    };
    ws.onerror = () => undefined;
    ws.onopen = () => {
      if (this.ws === ws) this.flush(ws);
    };
    ws.onclose = (ev) => {
      if (this.ws !== ws) return;
      this.ws = undefined;
      this.onClose(ev.code, ev.reason);
    };
  }

  private onMessage(data: unknown): void {
    if (typeof data === "string") return this.onControl(data);
    const raw = data instanceof ArrayBuffer ? new Uint8Array(data) : ArrayBuffer.isView(data) ? new Uint8Array(data.buffer, data.byteOffset, data.byteLength) : undefined;
    if (!raw) return;
    const { cursor, bytes } = decodeOutputFrame(raw);
    // A frame at or before the cursor was delivered already (a resumed attach never repeats it).
    if (this.cursor !== undefined && cursor <= this.cursor && !this.snapshotNext) return;
    this.push({ type: "output", cursor, bytes: bytes.slice(), reset: this.snapshotNext });
    this.snapshotNext = false;
    this.cursor = cursor;
    this.attempt = 0;
    if (this.queuedBytes > this.maxBytes() && this.ws) {
      // Too far behind: let go of the socket; the log keeps what follows, read from the cursor when caught up.
      this.parked = true;
      const ws = this.ws;
      this.ws = undefined;
      ws.close(1000, "consumer behind");
    }
  }

  private onControl(text: string): void {
    let frame: ServerFrame;
    try {
      frame = ServerFrame.parse(JSON.parse(text));
    } catch {
      return;
    }
    if (frame.type === "exit") this.push({ type: "exit", app: frame.app, code: frame.code });
    else if (frame.type === "truncated") this.push({ type: "truncated", from: frame.from });
  }

  private onClose(code: number, reason: string): void {
    if (this.ended || this.parked) return;
    // The log is complete (4000), or the gateway closed normally after the app's exit (1000): nothing more will come.
    if (code === CLOSE_ENDED || code === 1000) return this.finish();
    if (code === CLOSE_SUPERSEDED) return this.finish(apiError("conflict", "another controller attached to this terminal", 409));
    if (code === CLOSE_REVOKED) return this.finish(apiError("unauthenticated", reason || "the token was revoked", 401));
    if (RETRYABLE_CLOSE(code)) void this.reconnect();
  }

  private async reconnect(): Promise<void> {
    await this.t.backoff(this.attempt++, this.opts.signal);
    if (this.ended) return;
    try {
      await this.connect();
    } catch (err) {
      const e = err as PaddockApiError;
      if (e.retryable && !this.ended) return this.reconnect();
      this.finish(e);
    }
  }

  private async resume(): Promise<void> {
    this.parked = false;
    await this.reconnect();
  }

  private push(item: TerminalItem): void {
    this.queue.push(item);
    if (item.type === "output") this.queuedBytes += item.bytes.byteLength;
    this.wake();
  }

  private finish(failure?: PaddockApiError): void {
    this.failure = failure;
    this.ended = true;
    this.wake();
  }
}
