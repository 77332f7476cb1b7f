import type { NatsConnection } from "@nats-io/transport-node";
import type { Session } from "@paddock/contracts";
import type { Anomalies } from "./report.ts";
import type { ChaosStack } from "./stack.ts";

/** What the bad-input generators act on, and where they record outcomes. */
export interface FuzzContext {
  stack: ChaosStack;
  nc: NatsConnection;
  seed: number;
  fixtures: {
    /** A running session whose app (`cat` on a raw terminal) ignores any keystroke. */
    running: Session;
    /** A session that ended, with a log. */
    dead: Session;
    environmentId: string;
    tokenId: string;
    secretName: string;
    /** A webhook delivering to the harness's receiver, so webhook routes reach past "not found". */
    webhookId: string;
    /** Agents declared on the running session (issue 26), so agent routes reach past "not found". */
    agentIds: string[];
  };
  anomalies: Anomalies;
  /** Inputs sent, by target family (http, websocket, nats subject family). */
  sent: Map<string, number>;
  /** HTTP (and upgrade) answers by status. */
  statuses: Map<number, number>;
  /** KV keys written with malformed values (outside the compared state; purged afterwards). */
  planted: Array<{ bucket: string; key: string }>;
  /** Stream sequences of malformed messages stored in AUDIT (removed afterwards, so later audit checks see only real events). */
  auditSeqs: number[];
}

let counter = 0;

/** A global input number, quoted in anomaly details so one input can be found again from the seed. */
export function nextInput(ctx: FuzzContext, target: string): number {
  ctx.sent.set(target, (ctx.sent.get(target) ?? 0) + 1);
  return ++counter;
}

export function countStatus(ctx: FuzzContext, status: number): void {
  ctx.statuses.set(status, (ctx.statuses.get(status) ?? 0) + 1);
}

/** A short printable excerpt of an input or answer for a detail line. */
export function excerpt(value: unknown, max = 160): string {
  const s = typeof value === "string" ? value : Buffer.isBuffer(value) ? value.toString("latin1") : (JSON.stringify(value) ?? String(value));
  const printable = JSON.stringify(s.length > max ? `${s.slice(0, max)}…(${s.length})` : s);
  return printable;
}
