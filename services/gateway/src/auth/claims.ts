import type { Subscription } from "@nats-io/transport-node";
import { Headers, InputKind } from "@paddock/contracts";
import type { GatewayContext } from "../context.ts";

/**
 * Watches the controller claims on an app (`Subjects.claim`). Subscribed
 * BEFORE the attach rpc, so a newer controller's claim (any replica) cannot
 * slip in between.
 */
export class ClaimWatch {
  private myGeneration: number | undefined;
  private maxSeen = 0;
  private fired = false;
  onSuperseded: ((generation: number) => void) | undefined;
  readonly sub: Subscription;

  constructor(ctx: GatewayContext, subject: string) {
    this.sub = ctx.deps.nc.subscribe(subject, {
      callback: (err, msg) => {
        if (err || msg.headers?.get(Headers.inputKind) !== InputKind.claim) return;
        const raw = msg.headers.get(Headers.controllerGeneration);
        if (!/^\d{1,15}$/.test(raw)) return;
        this.maxSeen = Math.max(this.maxSeen, Number(raw));
        this.check();
      },
    });
  }

  /** The generation this controller was granted; a claim above it supersedes it. */
  grant(generation: number): void {
    this.myGeneration = generation;
    this.check();
  }

  get supersededBy(): number | undefined {
    return this.myGeneration !== undefined && this.maxSeen > this.myGeneration ? this.maxSeen : undefined;
  }

  private check(): void {
    const by = this.supersededBy;
    if (by === undefined || this.fired || !this.onSuperseded) return;
    this.fired = true;
    this.onSuperseded(by);
  }

  /** Arms the callback; fires at once if already superseded. */
  arm(cb: (generation: number) => void): void {
    this.onSuperseded = cb;
    this.check();
  }

  stop(): void {
    this.sub.unsubscribe();
  }
}
