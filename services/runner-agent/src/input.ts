import type { Msg, NatsConnection, Subscription } from "@nats-io/transport-node";
import { Headers, INPUT_CREDIT_HOLD_MS, INPUT_LOW_WATER_BYTES, InputCredit, InputKind, ResizeInput, Subjects } from "@paddock/contracts";
import { decodeJson, encodeJson } from "@paddock/bus";
import type { Logger } from "@paddock/logging";
import type { AppProcess } from "./app-process.ts";
import type { RunnerMetrics } from "./metrics.ts";

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
  /** False while the runner may have lost the session without knowing (see agent.ts `confirmed`): input is dropped. */
  accepting: () => boolean;
  gate: ControllerGate;
  app: (name: string) => AppProcess | undefined;
  metrics: Pick<RunnerMetrics, "invalidMessages" | "staleInput" | "inputOverflow">;
  log: Logger;
  /** How long a credit request may wait for the queue to drain before it is answered not ready. */
  creditHoldMs?: number;
}

/** Subscribes to one session's input subjects (core NATS: keystrokes are never replayed). */
export function subscribeInput(opts: InputOptions): Subscription {
  const subject = Subjects.input(opts.poolId, opts.runnerId, opts.sessionId, "*");
  return opts.nc.subscribe(subject, {
    callback: (err, msg) => {
      if (err) {
        opts.log.warn({ err, sessionId: opts.sessionId }, "input subscription error");
        return;
      }
      handleInput(opts, msg);
    },
  });
}

function handleInput(opts: InputOptions, msg: Msg): void {
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
  if (kind === InputKind.credit) {
    if (!msg.reply || msg.data.byteLength > 0) return reject("bad credit request");
    // Answered even for an app between generations: nothing is queued for it, so there is room.
    return answerCredit(opts, msg, opts.app(appName));
  }
  const app = opts.app(appName);
  if (!app) return reject("unknown app");
  const resize = kind === InputKind.resize ? decodeJson(ResizeInput, msg.data) : undefined;
  if (resize && !resize.ok) return reject(`bad resize: ${resize.reason}`);
  // Unconfirmed registration: the keystroke may be meant for a successor holding the session now.
  if (!opts.accepting() || !opts.gate.admit(Number(genText))) {
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
function answerCredit(opts: InputOptions, msg: Msg, app: AppProcess | undefined): void {
  const respond = (ready: boolean) => {
    try {
      msg.respond(encodeJson(InputCredit, { ready }));
    } catch (err) {
      opts.log.debug({ err, sessionId: opts.sessionId }, "credit answer not sent");
    }
  };
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
