import type { Msg, NatsConnection, Subscription } from "@nats-io/transport-node";
import { Headers, ResizeInput, Subjects } from "@paddock/contracts";
import { decodeJson } from "@paddock/bus";
import type { Logger } from "@paddock/logging";
import type { AppProcess } from "./app-process.ts";
import type { RunnerMetrics } from "./metrics.ts";

export const InputKind = { data: "data", resize: "resize", claim: "claim" } as const;
export type InputKind = (typeof InputKind)[keyof typeof InputKind];

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
  sessionId: string;
  gate: ControllerGate;
  app: (name: string) => AppProcess | undefined;
  metrics: Pick<RunnerMetrics, "invalidMessages" | "staleInput">;
  log: Logger;
}

/** Subscribes to one session's input subjects (core NATS: keystrokes are never replayed). */
export function subscribeInput(opts: InputOptions): Subscription {
  const subject = Subjects.input(opts.sessionId, "*");
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
    opts.metrics.invalidMessages.inc({ subject: Subjects.input(opts.sessionId, "*") });
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
  if (!opts.gate.admit(Number(genText))) {
    opts.metrics.staleInput.inc();
    return;
  }
  if (kind === InputKind.data && msg.data.byteLength > 0) app.write(msg.data);
  if (resize?.ok) app.resize(resize.value.cols, resize.value.rows);
}
