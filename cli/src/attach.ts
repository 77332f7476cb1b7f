import WebSocket from "ws";
import {
  CLOSE_ENDED,
  CLOSE_SLOW_CLIENT,
  CLOSE_SUPERSEDED,
  ServerFrame,
  decodeOutputFrame,
  fillPath,
  HttpApi,
  isTerminal,
  type AttachMode,
  type ClientFrame,
} from "@paddock/contracts";
import { errorFromText, unreachable, type ApiClient } from "./http.ts";
import { ApiError } from "./io.ts";

export type Since = "all" | "screen" | number;

export interface RetryPolicy {
  /** Consecutive failed reconnects before giving up. */
  readonly attempts: number;
  readonly baseMs: number;
  readonly maxMs: number;
}

export const DEFAULT_RETRY: RetryPolicy = { attempts: 6, baseMs: 200, maxMs: 5_000 };

export interface AttachOptions {
  readonly client: ApiClient;
  readonly sessionId: string;
  readonly app?: string | undefined;
  readonly mode: AttachMode;
  /** Where the first connection starts; reconnects resume after the last cursor seen. */
  readonly since: Since;
  readonly output: (bytes: Uint8Array) => void;
  /** A one-line message for the user (reconnects, truncation, read-only). */
  readonly notice: (text: string) => void;
  readonly retry?: RetryPolicy;
}

export type AttachOutcome =
  | { readonly kind: "exit"; readonly app: string; readonly code: number | null }
  | { readonly kind: "superseded"; readonly controllerGeneration: number | undefined }
  | { readonly kind: "detached" }
  /** The server closed normally without an exit frame (session gone, log complete). */
  | { readonly kind: "ended"; readonly reason: string };

/** What one WebSocket connection came to: a final outcome, or a disconnect worth retrying. */
type Attempt = { readonly outcome: AttachOutcome } | { readonly retry: string; readonly helloSeen: boolean };

/** Close codes after which a reconnect from the last cursor is the right move. */
const RETRYABLE_CLOSE: ReadonlySet<number> = new Set([CLOSE_SLOW_CLIENT, 1001, 1005, 1006, 1011, 1012, 1013, 1014]);
/** Input held or unwritten past this makes sendInput ask the caller to stop reading (backpressure; nothing is dropped). */
export const INPUT_HIGH_WATER_BYTES = 256 * 1024;
const READ_ONLY = "read_only";

/**
 * One terminal attachment that survives disconnects: it remembers the cursor
 * of the last output chunk and reconnects with since=<cursor> (bounded
 * retries with backoff), so output is neither lost nor repeated. Input and
 * the last resize are held while disconnected and sent after the next hello;
 * past INPUT_HIGH_WATER_BYTES held or not yet written to the socket, the
 * caller is asked to stop reading its input until whenWritable() resolves.
 * A controller attach refused because the session has ended (it can happen
 * any time: a `run` whose command exits before the attach) continues as a
 * viewer from the same place, which still replays the log and the exit.
 */
export class TerminalAttachment {
  /** Cursor of the last output chunk written; undefined before the first. */
  lastCursor: number | undefined;
  readonly done: Promise<AttachOutcome>;

  private ws: WebSocket | undefined;
  private ready = false;
  private pending: Buffer[] = [];
  private pendingBytes = 0;
  private size: { cols: number; rows: number } | undefined;
  private detached = false;
  private wake: (() => void) | undefined;
  private everConnected = false;
  private warnedReadOnly = false;
  /** A suspension was announced; the next live state is announced too. */
  private suspended = false;
  /** Bytes handed to the socket whose write has not completed (its send callback). */
  private inflight = 0;
  private writableWaiters: Array<() => void> = [];
  /** The app the server attached us to (its hello names it when --app was not given). */
  private attachedApp: string | undefined;
  private mode: AttachMode;

  /** The attachment reached its outcome: input has nowhere to go, and nobody waits for room. */
  private finished = false;

  constructor(private readonly opts: AttachOptions) {
    this.mode = opts.mode;
    this.done = this.run().finally(() => {
      this.finished = true;
      this.releaseWriters();
    });
  }

  /**
   * Stdin bytes for the app (controller only; a viewer's input is refused by
   * the server). Never dropped: held while disconnected. Returns false when
   * the caller should stop reading until whenWritable() resolves.
   */
  sendInput(bytes: Uint8Array): boolean {
    if (bytes.byteLength > 0) {
      const ws = this.ws;
      if (this.ready && ws?.readyState === WebSocket.OPEN) {
        this.sendTracked(ws, Buffer.from(bytes));
      } else {
        this.pending.push(Buffer.from(bytes));
        this.pendingBytes += bytes.byteLength;
      }
    }
    return this.writable();
  }

  /** Resolves once sendInput would accept more (and at once when the attachment is over). */
  whenWritable(): Promise<void> {
    if (this.writable()) return Promise.resolve();
    return new Promise((resolve) => this.writableWaiters.push(resolve));
  }

  private writable(): boolean {
    return this.finished || this.pendingBytes + this.inflight < INPUT_HIGH_WATER_BYTES;
  }

  private releaseWriters(): void {
    if (!this.writable()) return;
    for (const wake of this.writableWaiters.splice(0)) wake();
  }

  private sendTracked(ws: WebSocket, chunk: Buffer): void {
    this.inflight += chunk.byteLength;
    // ws calls back once the bytes are written to the socket, or with an error when it closed.
    ws.send(chunk, { binary: true }, () => {
      this.inflight -= chunk.byteLength;
      this.releaseWriters();
    });
  }

  resize(cols: number, rows: number): void {
    this.size = { cols: clamp(cols), rows: clamp(rows) };
    if (this.ready) this.sendResize();
  }

  /** Leaves the session running and ends the attachment with outcome "detached". */
  detach(): void {
    this.detached = true;
    this.ws?.close(1000, "detached");
    this.wake?.();
  }

  private async run(): Promise<AttachOutcome> {
    const retry = this.opts.retry ?? DEFAULT_RETRY;
    let failures = 0;
    for (;;) {
      const since = this.lastCursor !== undefined ? String(this.lastCursor) : String(this.opts.since);
      let attempt: Attempt;
      try {
        attempt = await this.connect(since);
      } catch (err) {
        if (await this.endedWhileController(err)) {
          this.mode = "viewer";
          continue;
        }
        throw err;
      }
      if ("outcome" in attempt) return attempt.outcome;
      if (attempt.helloSeen) failures = 0;
      failures += 1;
      if (failures > retry.attempts) {
        throw new ApiError("unavailable", `terminal connection lost (${attempt.retry}); gave up after ${String(retry.attempts)} retries`);
      }
      const delay = Math.min(retry.maxMs, retry.baseMs * 2 ** (failures - 1));
      this.opts.notice(`connection lost (${attempt.retry}); reconnecting from cursor ${String(this.lastCursor ?? since)}`);
      await this.sleep(delay);
      if (this.detached) return { kind: "detached" };
    }
  }

  /** Whether err is a controller attach refused because the session is in a terminal state. */
  private async endedWhileController(err: unknown): Promise<boolean> {
    if (this.mode !== "controller" || !(err instanceof ApiError) || err.code !== "conflict") return false;
    const session = await this.opts.client.call(HttpApi.getSession, { params: { id: this.opts.sessionId } });
    return isTerminal(session.state);
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(done, ms);
      function done() {
        clearTimeout(timer);
        resolve();
      }
      this.wake = done;
    });
  }

  private connect(since: string): Promise<Attempt> {
    const { client, sessionId, app } = this.opts;
    const mode = this.mode;
    const url = client.url(fillPath(HttpApi.attachTerminal.path, { id: sessionId }), { app, mode, since });
    url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
    return new Promise<Attempt>((resolve, reject) => {
      if (this.detached) {
        resolve({ outcome: { kind: "detached" } });
        return;
      }
      const ws = new WebSocket(url, { headers: { authorization: client.authHeader } });
      this.ws = ws;
      this.ready = false;
      let settled = false;
      let helloSeen = false;
      let acceptAnyCursor = false;
      const settle = (a: Attempt | Error) => {
        if (settled) return;
        settled = true;
        this.ready = false;
        if (a instanceof Error) reject(a);
        else resolve(a);
        if ("outcome" in a && ws.readyState === WebSocket.OPEN) ws.close(1000);
      };
      const finish = (outcome: AttachOutcome) => settle({ outcome });

      ws.on("unexpected-response", (_req, res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("error", () => settle({ retry: "connection reset during the upgrade", helloSeen }));
        res.on("end", () => {
          const err = errorFromText(res.statusCode ?? 0, Buffer.concat(chunks).toString("utf8"));
          const transient = err.retryable || (res.statusCode ?? 0) >= 502;
          settle(transient ? { retry: `${err.code}: ${err.message}`, helloSeen } : err);
        });
      });
      ws.on("error", (err) => {
        if (this.detached) finish({ kind: "detached" });
        else if (!this.everConnected) settle(unreachable(client.baseUrl, err));
        else settle({ retry: err.message, helloSeen });
      });
      ws.on("close", (code, reasonBuf) => {
        const reason = reasonBuf.toString("utf8");
        if (this.detached) return finish({ kind: "detached" });
        if (code === CLOSE_SUPERSEDED) return finish({ kind: "superseded", controllerGeneration: undefined });
        if (code === 1000 || code === CLOSE_ENDED) return finish({ kind: "ended", reason: reason || `closed with code ${String(code)}` });
        if (RETRYABLE_CLOSE.has(code)) return settle({ retry: `closed with code ${String(code)}${reason ? `: ${reason}` : ""}`, helloSeen });
        settle(new ApiError("internal", `terminal closed with code ${String(code)}${reason ? `: ${reason}` : ""}`));
      });
      ws.on("message", (data, isBinary) => {
        if (settled) return;
        const buf = toBuffer(data);
        if (isBinary) {
          let frame: { cursor: number; bytes: Uint8Array };
          try {
            frame = decodeOutputFrame(buf);
          } catch {
            this.opts.notice("ignoring a malformed output frame");
            return;
          }
          // Exactly-once across reconnects: a chunk at or before the last cursor was already written.
          if (!acceptAnyCursor && this.lastCursor !== undefined && frame.cursor <= this.lastCursor) return;
          acceptAnyCursor = false;
          this.lastCursor = frame.cursor;
          this.opts.output(frame.bytes);
          return;
        }
        const parsed = parseFrame(buf.toString("utf8"));
        if (!parsed) {
          this.opts.notice("ignoring an unexpected frame from the server");
          return;
        }
        switch (parsed.type) {
          case "hello":
            helloSeen = true;
            this.attachedApp = parsed.app;
            this.everConnected = true;
            this.ready = true;
            this.flush();
            return;
          case "truncated":
            // The log no longer holds what we asked for; a screen snapshot follows.
            this.opts.notice(`the log no longer holds output before cursor ${String(parsed.from)}; showing the current screen`);
            acceptAnyCursor = true;
            return;
          case "superseded":
            return finish({ kind: "superseded", controllerGeneration: parsed.controllerGeneration });
          case "exit":
            if (parsed.app === (app ?? this.attachedApp ?? parsed.app)) finish({ kind: "exit", app: parsed.app, code: parsed.code });
            return;
          case "error":
            if (parsed.code === READ_ONLY) {
              if (!this.warnedReadOnly) this.opts.notice("attached as a viewer: input is not sent");
              this.warnedReadOnly = true;
            } else {
              this.opts.notice(`server: ${parsed.code}${parsed.message ? `: ${parsed.message}` : ""}`);
            }
            return;
          case "status":
            // Only what a user at the terminal cannot see: a suspension, and the resume after it.
            // Placement (queued → running) is silent, and an end comes as an exit frame or a close.
            if (parsed.state === "suspended_warm" || parsed.state === "suspended_cold") {
              this.suspended = true;
              this.opts.notice(`session is now ${parsed.state}`);
            } else if (this.suspended && !isTerminal(parsed.state)) {
              this.suspended = false;
              this.opts.notice(`session resumed (${parsed.state})`);
            }
            return;
        }
      });
    });
  }

  private flush(): void {
    if (this.size) this.sendResize();
    const ws = this.ws;
    if (!ws) return;
    const pending = this.pending;
    this.pending = [];
    this.pendingBytes = 0;
    for (const chunk of pending) this.sendTracked(ws, chunk);
    this.releaseWriters();
  }

  private sendResize(): void {
    if (!this.size || this.ws?.readyState !== WebSocket.OPEN) return;
    const frame: ClientFrame = { type: "resize", ...this.size };
    this.ws.send(JSON.stringify(frame));
  }
}

function parseFrame(text: string): ServerFrame | undefined {
  try {
    const r = ServerFrame.safeParse(JSON.parse(text));
    return r.success ? r.data : undefined;
  } catch {
    return undefined;
  }
}

function toBuffer(data: WebSocket.RawData): Buffer {
  if (Buffer.isBuffer(data)) return data;
  if (Array.isArray(data)) return Buffer.concat(data);
  return Buffer.from(data);
}

function clamp(n: number): number {
  return Math.max(1, Math.min(1000, Math.floor(n) || 1));
}
