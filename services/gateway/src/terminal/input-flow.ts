import { headers, type NatsConnection } from "@nats-io/transport-node";
import {
  Headers,
  INPUT_CREDIT_HOLD_MS,
  INPUT_WINDOW_BYTES,
  INPUT_WINDOW_MESSAGES,
  InputCredit,
  InputKind,
  ResizeInput,
  Subjects,
} from "@paddock/contracts";
import { decodeJson, encoderOf, isNoResponders } from "@paddock/bus";
import type { Logger } from "@paddock/logging";

/** Where a controller's input goes now: the record's placement (it may move while attached). */
export interface InputTarget {
  poolId: string;
  runnerId: string;
}

export interface InputFlowOptions {
  nc: NatsConnection;
  log: Logger;
  sessionId: string;
  app: string;
  controllerGeneration: number;
  /** Where the session is now, as last read from its record (undefined: not placed). */
  target: () => InputTarget | undefined;
  /** Called when the window opens again after blocked was true (the caller reads its socket again). */
  onOpen: () => void;
  windowBytes?: number;
  windowMessages?: number;
  /** How long a credit request waits for its answer (the runner answers within INPUT_CREDIT_HOLD_MS). */
  creditTimeoutMs?: number;
}

/** What a credit request ended with. */
type CreditAnswer = "ready" | "not_ready" | "no_runner" | "failed";

/**
 * One controller's input to the runner, flow-controlled. Core NATS does not
 * push back, so after a window of bytes or messages the sender asks the runner
 * for credit (a request on the same subject, so it arrives after the input it
 * covers) and sends nothing more until the app's input queue has room again.
 * While blocked the caller stops reading its WebSocket: TCP pushes back on the
 * client, and nothing is dropped.
 */
export class InputFlow {
  private sentBytes = 0;
  private sentMessages = 0;
  private waiting = false;
  private stopped = false;
  private readonly windowBytes: number;
  private readonly windowMessages: number;

  constructor(private readonly opts: InputFlowOptions) {
    this.windowBytes = opts.windowBytes ?? INPUT_WINDOW_BYTES;
    this.windowMessages = opts.windowMessages ?? INPUT_WINDOW_MESSAGES;
  }

  /** True while the window is spent: send nothing until onOpen. */
  get blocked(): boolean {
    return this.waiting;
  }

  /** Publishes stdin bytes or a resize to where the session is; asks for credit once the window is spent. */
  send(target: InputTarget, bytes: Uint8Array, resize: { cols: number; rows: number } | undefined): void {
    if (this.stopped) return;
    const h = this.headersOf(resize ? InputKind.resize : InputKind.data);
    this.opts.nc.publish(this.subjectOf(target), resize ? encoderOf(this.opts.nc)(ResizeInput, resize) : bytes, { headers: h });
    this.sentBytes += resize ? 0 : bytes.byteLength;
    this.sentMessages += 1;
    if (this.sentBytes >= this.windowBytes || this.sentMessages >= this.windowMessages) this.askCredit();
  }

  /** The attachment closed: no more credit requests, no more onOpen. */
  stop(): void {
    this.stopped = true;
  }

  private askCredit(): void {
    if (this.waiting) return;
    this.waiting = true;
    void this.waitForCredit();
  }

  private async waitForCredit(): Promise<void> {
    for (;;) {
      // Asked where the session is now: after a move, the new runner's queue is what matters.
      const target = this.opts.target();
      const answer = target ? await this.requestCredit(target) : "no_runner";
      if (this.stopped) return;
      // Not ready: the program is not reading yet; ask again (the runner holds each request a while).
      // Failed: a timeout (the runner is stalled); ask again, the record will move the session if it is lost.
      if (answer === "not_ready" || answer === "failed") continue;
      // Ready, or nobody takes this subject (the session moved or ended): the window starts over.
      this.sentBytes = 0;
      this.sentMessages = 0;
      this.waiting = false;
      this.opts.onOpen();
      return;
    }
  }

  private async requestCredit(target: InputTarget): Promise<CreditAnswer> {
    try {
      const reply = await this.opts.nc.request(this.subjectOf(target), new Uint8Array(0), {
        headers: this.headersOf(InputKind.credit),
        timeout: this.opts.creditTimeoutMs ?? INPUT_CREDIT_HOLD_MS + 5_000,
      });
      const credit = decodeJson(InputCredit, reply.data);
      return credit.ok && credit.value.ready ? "ready" : "not_ready";
    } catch (err) {
      const noRunner = isNoResponders(err);
      if (!noRunner) this.opts.log.debug({ err, sessionId: this.opts.sessionId }, "input credit request failed");
      return noRunner ? "no_runner" : "failed";
    }
  }

  private subjectOf(target: InputTarget): string {
    return Subjects.input(target.poolId, target.runnerId, this.opts.sessionId, this.opts.app);
  }

  private headersOf(kind: InputKind): ReturnType<typeof headers> {
    const h = headers();
    h.set(Headers.inputKind, kind);
    h.set(Headers.controllerGeneration, String(this.opts.controllerGeneration));
    return h;
  }
}
