import type { Msg, NatsConnection, Subscription } from "@nats-io/transport-node";
import { Headers, InputKind, ResizeInput, Subjects } from "@paddock/contracts";
import { decodeJson } from "@paddock/bus";
import type { Logger } from "@paddock/logging";
import type { AppProcess } from "./app-process.ts";
import type { RunnerMetrics } from "./metrics.ts";

const kinds: ReadonlySet<string> = new Set(Object.values(InputKind));

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
  metrics: Pick<RunnerMetrics, "invalidMessages" | "staleInput">;
  log: Logger;
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
  const app = opts.app(appName);
  if (!app) return reject("unknown app");
  const kind = msg.headers?.get(Headers.inputKind) ?? "";
  if (!kinds.has(kind)) return reject("unknown input kind");
  const genText = msg.headers?.get(Headers.controllerGeneration) ?? "";
  if (!/^\d{1,15}$/.test(genText)) return reject("missing controller generation");
  const resize = kind === InputKind.resize ? decodeJson(ResizeInput, msg.data) : undefined;
  if (resize && !resize.ok) return reject(`bad resize: ${resize.reason}`);
  // Unconfirmed registration: the keystroke may be meant for a successor holding the session now.
  if (!opts.accepting() || !opts.gate.admit(Number(genText))) {
    opts.metrics.staleInput.inc();
    return;
  }
  if (kind === InputKind.data && msg.data.byteLength > 0) app.write(msg.data);
  if (resize?.ok) app.resize(resize.value.cols, resize.value.rows);
}
