import { DeliverPolicy, jetstream, type ConsumerMessages } from "@nats-io/jetstream";
import type { RawData, WebSocket } from "ws";
import {
  type AttachMode,
  CLOSE_REVOKED,
  CLOSE_SLOW_CLIENT,
  CLOSE_SUPERSEDED,
  encodeOutputFrame,
  ServerFrame,
  Streams,
  Subjects,
  TERM_CHUNK_MAX_BYTES,
  type AttachQuery,
  type Scope,
  type Session,
  type SessionState,
  isTerminal,
} from "@paddock/contracts";

import { encodeJson, PULL_OPTIONS } from "@paddock/bus";
import type { Principal } from "../auth/auth.ts";
import { outputStart } from "./attach-since.ts";
import type { GatewayContext } from "../context.ts";
import { HeldInput, HOLD_INPUT_STATES, parseClientFrame, type Resize } from "./held-input.ts";
import { InputFlow } from "./input-flow.ts";
import { FrameBudget } from "../http/limits.ts";
import type { Watcher } from "./presence.ts";
import type { Revocable } from "../auth/revocation.ts";
import type { ClaimWatch } from "../auth/claims.ts";
import { ChunkVerdict, exitCodeOf, judgeChunk, terminalSizeOf, type Placement } from "./termlog.ts";

/** A pull bounded in bytes: 256 chunks of 256 KiB would queue 64 MiB ahead of other attachments' chunks on the one connection. */
const TERM_PULL = { max_bytes: 8 * TERM_CHUNK_MAX_BYTES, expires: PULL_OPTIONS.expires } as const;

export { MAX_HELD_INPUT_BYTES } from "./held-input.ts";

/** Everything decided before the upgrade is accepted. */
export interface AttachGrant {
  /** Who attached; status refreshes read the record with it. */
  scope: Scope;
  /** The token the socket lives by: revoked or expired, the socket is closed (4003). */
  principal: Principal;
  session: Session;
  app: string;
  mode: AttachMode;
  since: AttachQuery["since"];
  /** Sequence of the last TERM chunk of the app at attach time (0: empty). */
  helloCursor: number;
  /** The controller generation granted (controller) or current (viewer). */
  controllerGeneration: number;
  claims?: ClaimWatch | undefined;
}

type Outcome = { kind: "exit"; code: number | null } | { kind: "stopped" };

/** One terminal WebSocket: hello, replay + live output, controller input, supersede, status. */
export class Attachment implements Watcher, Revocable {
  readonly sessionId: string;
  readonly workspaceId: string;
  readonly scope: Scope;
  readonly tokenHash: string;
  private readonly budget: FrameBudget;
  private state: SessionState;
  private closed = false;
  private superseded = false;
  private alive = true;
  private messages: ConsumerMessages | undefined;
  /** Where the record places the session, as last read: input goes there, and only its chunks are shown. */
  private placement: Placement;
  /** The app's log across runners. */
  private readonly termFilter: string;
  /** Controller input sent before the session ran, in order (held-input.ts). */
  private readonly held = new HeldInput();
  /** Frames read from the socket and not handled yet (the socket is paused while this is not empty). */
  private inbox: Array<{ data: RawData; isBinary: boolean }> = [];
  /** Over the frame budget: the timer that reads on when its window ends. */
  private budgetTimer: NodeJS.Timeout | undefined;
  /** The controller's flow-controlled path to the runner. */
  private readonly flow: InputFlow;

  constructor(
    private readonly ctx: GatewayContext,
    private readonly ws: WebSocket,
    private readonly grant: AttachGrant,
    private readonly onClosed: (a: Attachment) => void,
  ) {
    this.sessionId = grant.session.id;
    this.workspaceId = grant.session.workspaceId;
    this.scope = grant.scope;
    this.tokenHash = grant.principal.tokenHash;
    this.budget = new FrameBudget(ctx.deps.config.wsInputFramesPerSecond, ctx.deps.now);
    this.state = grant.session.state;
    this.placement = grant.session;
    this.termFilter = Subjects.termOfApp(grant.session.id, grant.app);
    this.flow = new InputFlow({
      nc: ctx.deps.nc,
      log: ctx.deps.log,
      sessionId: grant.session.id,
      app: grant.app,
      controllerGeneration: grant.controllerGeneration,
      target: () => {
        const { poolId, runnerId } = this.placement;
        return poolId === undefined || runnerId === undefined ? undefined : { poolId, runnerId };
      },
      onOpen: () => this.readInbox(),
    });
  }

  start(): void {
    const { metrics, log } = this.ctx.deps;
    metrics.wsOpen.inc({ mode: this.grant.mode });
    this.ws.on("message", (data, isBinary) => {
      if (this.closed || this.superseded) {
        metrics.inputDropped.inc({ reason: "closed" });
        return;
      }
      this.inbox.push({ data, isBinary });
      this.readInbox();
    });
    this.ws.on("pong", () => (this.alive = true));
    this.ws.on("close", () => this.cleanup());
    this.ws.on("error", () => this.cleanup());
    this.sendFrame({
      type: "hello",
      sessionId: this.grant.session.id,
      app: this.grant.app,
      mode: this.grant.mode,
      controllerGeneration: this.grant.controllerGeneration,
      cursor: this.grant.helloCursor,
    });
    this.grant.claims?.arm((generation) => this.supersede(generation));
    if (this.closed) return;
    this.pump().then(
      (outcome) => {
        if (outcome.kind === "exit" && !this.closed) {
          this.sendFrame({ type: "exit", app: this.grant.app, code: outcome.code });
          this.close(1000, "app exited");
        }
      },
      (err: unknown) => {
        if (this.closed) return;
        log.error({ err, sessionId: this.grant.session.id, app: this.grant.app }, "terminal output failed");
        this.close(1011, "output failed");
      },
    );
  }

  /** Keepalive tick: a client that did not answer the previous ping is dropped. */
  heartbeat(): void {
    // Paused (backpressure), the socket's pongs wait unread behind the input: not a sign of a dead client.
    if (this.ws.isPaused) this.alive = true;
    if (!this.alive) {
      this.ws.terminate();
      this.cleanup();
      return;
    }
    this.alive = false;
    this.ws.ping();
  }

  /** A fresh read of the record: follow its placement, and tell the client a new state. */
  observe(session: Session): void {
    if (session.placementGeneration >= this.placement.placementGeneration) this.placement = session;
    if (session.state === this.state) return;
    this.state = session.state;
    this.sendFrame({ type: "status", state: session.state });
    this.releaseHeldInput();
  }

  get awaitsState(): boolean {
    return this.grant.mode === "controller" && HOLD_INPUT_STATES.has(this.state);
  }

  /** The token this socket was opened with was revoked or expired: tell the client, close with 4003. */
  revoke(reason: string): void {
    if (this.closed) return;
    this.sendFrame({ type: "error", code: "unauthenticated", message: reason });
    this.close(CLOSE_REVOKED, reason);
  }

  /** Closes the socket (1001) because the gateway stops. */
  shutdown(): void {
    this.close(1001, "gateway stopping");
  }

  private async pump(): Promise<Outcome> {
    const { nc, metrics } = this.ctx.deps;
    const { helloCursor, session } = this.grant;
    const start = await outputStart(this.ctx, this.grant.since, this.termFilter, (from) => this.sendFrame({ type: "truncated", from }));
    let startSeq = start.startSeq;
    const snapshot = start.snapshot;
    if (snapshot) {
      // One frame with the screen as of the hello cursor (from the incrementally
      // fed emulator), then every chunk after it.
      const screen = await this.ctx.screens.snapshot(session.id, this.grant.app, helloCursor, this.placement);
      if (this.closed) return { kind: "stopped" };
      await this.sendOutput(screen.cursor, screen.bytes, true);
      startSeq = screen.cursor + 1;
    }
    if (this.closed) return { kind: "stopped" };
    const consumer = await jetstream(nc).consumers.get(Streams.term, {
      filter_subjects: [this.termFilter],
      ...(startSeq === undefined
        ? { deliver_policy: DeliverPolicy.All }
        : { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: startSeq }),
    });
    if (this.closed) return { kind: "stopped" };
    this.messages = await consumer.consume(TERM_PULL);
    if (this.closed) {
      await this.messages.close();
      return { kind: "stopped" };
    }
    for await (const m of this.messages) {
      if (this.closed) return { kind: "stopped" };
      // Judged and sent without awaiting in the common case: every await is a turn of latency on a keystroke's echo.
      const first = judgeChunk(m.subject, m.headers, this.placement);
      const verdict = first === ChunkVerdict.ahead ? await this.judgeAhead(m.subject, m.headers) : first;
      if (verdict !== ChunkVerdict.live) {
        metrics.droppedChunks.inc({ reason: verdict });
      } else {
        const exit = exitCodeOf(m.headers);
        if (exit !== undefined) return { kind: "exit", code: exit };
        // A resize marker is for screens (snapshots), not output: the client's own terminal has its size.
        if (terminalSizeOf(m.headers) !== undefined) continue;
        const seq = m.seq;
        const full = this.sendOutput(seq, m.data, seq <= helloCursor);
        if (full) await full;
      }
      if (this.closed) return { kind: "stopped" };
    }
    return { kind: "stopped" };
  }

  /**
   * A chunk of a newer generation than the placement known (the session
   * moved while attached): re-reads the record once and judges again, so the
   * new runner's output is shown and anyone else's is not.
   */
  private async judgeAhead(subject: string, h: Parameters<typeof judgeChunk>[1]): Promise<ChunkVerdict> {
    try {
      this.observe(await this.ctx.getSession(this.scope, this.sessionId));
    } catch {
      return ChunkVerdict.foreign;
    }
    const again = judgeChunk(subject, h, this.placement);
    return again === ChunkVerdict.ahead ? ChunkVerdict.foreign : again;
  }

  /**
   * Sends one output frame. While replaying, a full buffer is waited out (the
   * client reads at its own pace); live, it closes the client with 4008 so it
   * resumes from its cursor instead of holding the gateway's memory. Answers
   * a promise only when the caller must wait (replaying into a full buffer).
   */
  private sendOutput(cursor: number, bytes: Uint8Array, replaying: boolean): Promise<void> | undefined {
    const limit = this.ctx.deps.config.wsSendBufferBytes;
    const frame = encodeOutputFrame(cursor, bytes);
    if (replaying && this.ws.bufferedAmount > limit) {
      return new Promise<void>((resolve) => this.ws.send(frame, () => resolve()));
    }
    this.ws.send(frame);
    if (!replaying && this.ws.bufferedAmount > limit) {
      this.ctx.deps.metrics.slowClients.inc();
      this.close(CLOSE_SLOW_CLIENT, "send buffer full: resume from your cursor");
    }
    return undefined;
  }

  /**
   * Handles the frames read so far, in order, while nothing blocks them: the
   * frame budget, input held up to its bound, or a spent credit window. While
   * blocked the socket is paused, so TCP pushes back on the client; it is
   * read again once whatever blocked it clears (this runs again then).
   */
  private readInbox(): void {
    while (this.inbox.length > 0 && !this.closed) {
      if (this.inputBlocked()) {
        this.ws.pause();
        return;
      }
      // Every frame counts, text or binary, viewer or controller.
      const waitMs = this.budget.take();
      if (waitMs !== undefined) {
        this.ws.pause();
        this.budgetTimer ??= setTimeout(() => {
          this.budgetTimer = undefined;
          this.readInbox();
        }, waitMs);
        return;
      }
      const frame = this.inbox.shift()!;
      this.onInput(frame.data, frame.isBinary);
    }
    if (!this.closed && this.ws.isPaused) this.ws.resume();
  }

  private inputBlocked(): boolean {
    if (this.budgetTimer !== undefined) return true;
    if (HOLD_INPUT_STATES.has(this.state)) return this.held.full;
    return this.flow.blocked;
  }

  private onInput(data: RawData, isBinary: boolean): void {
    const { metrics } = this.ctx.deps;
    if (this.closed || this.superseded) {
      metrics.inputDropped.inc({ reason: "closed" });
      return;
    }
    const bytes = Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data as ArrayBuffer);
    let resize: Resize | undefined;
    if (!isBinary) {
      const frame = parseClientFrame(bytes);
      if (!frame) {
        this.sendFrame({ type: "error", code: "invalid", message: "unknown or malformed text frame" });
        return;
      }
      resize = { cols: frame.cols, rows: frame.rows };
    }
    if (this.grant.mode !== "controller") {
      metrics.inputDropped.inc({ reason: "read_only" });
      this.sendFrame({ type: "error", code: "read_only", message: "viewers cannot send input" });
      return;
    }
    if (HOLD_INPUT_STATES.has(this.state)) {
      this.held.push(bytes, resize);
      return;
    }
    this.forwardInput(bytes, resize);
  }

  private releaseHeldInput(): void {
    if (HOLD_INPUT_STATES.has(this.state)) return;
    const held = this.held.drain();
    // Ended without running (canceled, failed): nothing will ever read it.
    if (isTerminal(this.state)) {
      if (held.length > 0) this.ctx.deps.metrics.inputDropped.inc({ reason: "ended" }, held.length);
    } else {
      for (const { bytes, resize } of held) this.forwardInput(bytes, resize);
    }
    // Frames waiting behind the bound of held input go on now.
    this.readInbox();
  }

  private forwardInput(bytes: Buffer, resize: Resize | undefined): void {
    const { metrics } = this.ctx.deps;
    const { poolId, runnerId } = this.placement;
    if (poolId === undefined || runnerId === undefined) {
      metrics.inputDropped.inc({ reason: "not_placed" });
      return;
    }
    this.flow.send({ poolId, runnerId }, bytes, resize);
  }

  private supersede(generation: number): void {
    if (this.closed || this.superseded) return;
    this.superseded = true;
    this.ctx.deps.metrics.superseded.inc();
    this.sendFrame({ type: "superseded", controllerGeneration: generation });
    this.close(CLOSE_SUPERSEDED, "superseded by a newer controller");
  }

  private sendFrame(frame: ServerFrame): void {
    if (this.closed) return;
    this.ws.send(encodeJson(ServerFrame, frame), { binary: false });
  }

  private close(code: number, reason: string): void {
    if (this.closed) return;
    this.ws.close(code, reason);
    this.cleanup();
    // A client that never reads cannot take the close frame; do not wait on it forever.
    const timer = setTimeout(() => this.ws.terminate(), 5_000);
    timer.unref();
    this.ws.once("close", () => clearTimeout(timer));
  }

  private cleanup(): void {
    if (this.closed) return;
    this.closed = true;
    this.flow.stop();
    if (this.budgetTimer !== undefined) clearTimeout(this.budgetTimer);
    // The socket is gone: frames read but not handled have nowhere to go.
    if (this.inbox.length > 0) this.ctx.deps.metrics.inputDropped.inc({ reason: "closed" }, this.inbox.length);
    this.inbox = [];
    this.ctx.deps.metrics.wsOpen.dec({ mode: this.grant.mode });
    this.grant.claims?.stop();
    const messages = this.messages;
    this.messages = undefined;
    if (messages) {
      messages.close().catch(() => undefined);
    }
    this.onClosed(this);
  }
}
