import type { Msg, NatsConnection, Subscription } from "@nats-io/transport-node";
import { Headers, INPUT_CREDIT_HOLD_MS, INPUT_LOW_WATER_BYTES, InputCredit, InputKind, ResizeInput, Subjects } from "@paddock/contracts";
import { decodeJson, encoderOf } from "@paddock/bus";
import type { Logger } from "@paddock/logging";
import type { AppProcess } from "../sandbox/process-group.ts";
import type { RunnerMetrics } from "../metrics.ts";

const kinds: ReadonlySet<string> = new Set(Object.values(InputKind));

/**
 * An app's input queue never holds more than this. Senders keep it near
 * INPUT_LOW_WATER_BYTES + INPUT_WINDOW_BYTES by waiting for credit; only a
 * sender ignoring the protocol reaches it, and what it sends past it is
 * dropped and counted.
 */
export const INPUT_QUEUE_CAP_BYTES = 1024 * 1024;

/**
 * The highest controller generation seen for one session. A newer controller
 * supersedes older ones, so input carrying a lower generation is dropped,
 * whichever app it targets.
 */
export class ControllerGate {
  private highest = 0;

  get generation(): number {
    return this.highest;
  }

  /** True when the generation is current (raising the floor if newer). */
  admit(generation: number): boolean {
    if (generation < this.highest) return false;
    this.highest = generation;
    return true;
  }
}

export interface InputOptions {
  nc: NatsConnection;
  /** This runner: gateways address a session's input to the runner holding it. */
  poolId: string;
  runnerId: string;
  sessionId: string;
  /** Whether input may reach the apps now (see agent.ts `confirmed`); what arrives while it may not is held. */
  admission: InputAdmission;
  gate: ControllerGate;
  app: (name: string) => AppProcess | undefined;
  metrics: Pick<RunnerMetrics, "invalidMessages" | "staleInput" | "inputOverflow">;
  log: Logger;
  /** How long a credit request may wait for the queue to drain before it is answered not ready. */
  creditHoldMs?: number;
}

/**
 * Whether controller input may reach the apps. A runner stopped past its lease
 * (SIGSTOP, a long stall) may have lost its sessions without knowing: until a
 * check confirms its registration again, input is held, not applied.
 */
export interface InputAdmission {
  /** True while the runner's registration is confirmed. */
  open(): boolean;
  /** Bumped on every registration change: input held across one is dropped (the session may be a successor's). */
  epoch(): number;
  /** Calls listener after each confirmation; returns the unsubscribe. */
  onConfirmed(listener: () => void): () => void;
}

/** Subscribes to one session's input subjects (core NATS: keystrokes are never replayed). */
export function subscribeInput(opts: InputOptions): Subscription {
  const subject = Subjects.input(opts.poolId, opts.runnerId, opts.sessionId, "*");
  const held = new UnconfirmedInput(opts, (msg) => handleInput(opts, msg, held));
  const sub = opts.nc.subscribe(subject, {
    callback: (err, msg) => {
      if (err) {
        opts.log.warn({ err, sessionId: opts.sessionId }, "input subscription error");
        return;
      }
      handleInput(opts, msg, held);
    },
  });
  void sub.closed.finally(() => held.close());
  return sub;
}

/**
 * Input that arrived while the registration was unconfirmed, in order. The
 * next confirmation of the same registration replays it (a lagging event
 * loop let the confirmation lapse; nothing moved); a registration change in
 * between drops it, counted as stale, since the session may be a successor's.
 * Credit requests wait here too, so a sender stays within its window.
 */
class UnconfirmedInput {
  private held: Msg[] = [];
  private bytes = 0;
  private epoch = 0;
  private unsubscribe: (() => void) | undefined;

  constructor(
    private readonly opts: InputOptions,
    private readonly replay: (msg: Msg) => void,
  ) {}

  get holding(): boolean {
    return this.held.length > 0;
  }

  hold(msg: Msg): void {
    if (this.held.length === 0) {
      this.epoch = this.opts.admission.epoch();
      this.unsubscribe = this.opts.admission.onConfirmed(() => this.settle());
    }
    if (this.bytes + msg.data.byteLength > INPUT_QUEUE_CAP_BYTES) {
      this.opts.metrics.inputOverflow.inc();
      return;
    }
    this.held.push(msg);
    this.bytes += msg.data.byteLength;
  }

  private settle(): void {
    if (!this.opts.admission.open() && this.opts.admission.epoch() === this.epoch) return;
    const held = this.held;
    this.close();
    if (this.opts.admission.epoch() !== this.epoch) {
      for (const msg of held) dropStale(this.opts, msg);
      return;
    }
    for (const msg of held) this.replay(msg);
  }

  close(): void {
    this.unsubscribe?.();
    this.unsubscribe = undefined;
    this.held = [];
    this.bytes = 0;
  }
}

function dropStale(opts: InputOptions, msg: Msg): void {
  opts.metrics.staleInput.inc();
  // A waiting sender is released: the session is leaving this runner, and its attachment follows the record.
  if (msg.headers?.get(Headers.inputKind) === InputKind.credit) respondCredit(opts, msg, true);
}

function handleInput(opts: InputOptions, msg: Msg, held: UnconfirmedInput): void {
  const reject = (reason: string) => {
    // One label per runner, not per session: metric cardinality stays bounded.
    opts.metrics.invalidMessages.inc({ subject: Subjects.inputOfRunner(opts.poolId, opts.runnerId) });
    // The subject and reason only: never the bytes.
    opts.log.debug({ subject: msg.subject, reason }, "invalid input dropped");
  };
  const appName = msg.subject.slice(msg.subject.lastIndexOf(".") + 1);
  const kind = msg.headers?.get(Headers.inputKind) ?? "";
  if (!kinds.has(kind)) return reject("unknown input kind");
  const genText = msg.headers?.get(Headers.controllerGeneration) ?? "";
  if (!/^\d{1,15}$/.test(genText)) return reject("missing controller generation");
  if (kind === InputKind.credit && (!msg.reply || msg.data.byteLength > 0)) return reject("bad credit request");
  // Unconfirmed registration: held in order until a confirmation says whether it is still ours.
  if (!opts.admission.open() || held.holding) return held.hold(msg);
  if (kind === InputKind.credit) {
    // Answered even for an app between generations: nothing is queued for it, so there is room.
    return answerCredit(opts, msg, opts.app(appName));
  }
  const app = opts.app(appName);
  if (!app) return reject("unknown app");
  const resize = kind === InputKind.resize ? decodeJson(ResizeInput, msg.data) : undefined;
  if (resize && !resize.ok) return reject(`bad resize: ${resize.reason}`);
  // An older controller's input never reaches the app.
  if (!opts.gate.admit(Number(genText))) {
    opts.metrics.staleInput.inc();
    return;
  }
  if (kind === InputKind.data && msg.data.byteLength > 0) queueData(opts, app, msg);
  if (resize?.ok) app.resize(resize.value.cols, resize.value.rows);
}

function queueData(opts: InputOptions, app: AppProcess, msg: Msg): void {
  if (app.input.queuedBytes + msg.data.byteLength > INPUT_QUEUE_CAP_BYTES) {
    opts.metrics.inputOverflow.inc();
    opts.log.warn({ sessionId: opts.sessionId, app: app.name, bytes: msg.data.byteLength }, "input past the queue bound dropped (the sender ignored credit)");
    return;
  }
  app.input.push(msg.data);
}

/**
 * Messages on one subject from one connection arrive in order, so what the
 * sender published before this request is queued already: answer ready once
 * the queue is back under its low-water mark, or not ready after the hold (the
 * sender asks again; a response is allowed only within a minute).
 */
function respondCredit(opts: InputOptions, msg: Msg, ready: boolean): void {
  try {
    msg.respond(encoderOf(opts.nc)(InputCredit, { ready }));
  } catch (err) {
    opts.log.debug({ err, sessionId: opts.sessionId }, "credit answer not sent");
  }
}

function answerCredit(opts: InputOptions, msg: Msg, app: AppProcess | undefined): void {
  const respond = (ready: boolean) => respondCredit(opts, msg, ready);
  if (!app) return respond(true);
  const queue = app.input;
  const notify = () => {
    clearTimeout(timer);
    respond(true);
  };
  const timer = setTimeout(() => {
    queue.cancelWait(notify);
    respond(false);
  }, opts.creditHoldMs ?? INPUT_CREDIT_HOLD_MS);
  timer.unref();
  queue.whenBelow(INPUT_LOW_WATER_BYTES, notify);
}
