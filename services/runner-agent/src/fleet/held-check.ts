/**
 * The runner's side of the held check: every interval it names the
 * placements it has held at least that long and tears down those whose
 * record ended without the teardown reaching it. The scheduler sends a
 * destroy after the write that ends a session, so a scheduler killed in
 * between (or a publish lost in a broker failover) would otherwise leave the
 * sandbox running until the runner next re-registers — maybe never (found by
 * `pnpm chaos`, crashes: `sleep 3600` of deleted sessions still running).
 */
import type { NatsConnection } from "@nats-io/transport-node";
import { FleetRpc, HELD_CHECK_MAX_SESSIONS, type HeldSession } from "@paddock/contracts";
import { callRpc } from "@paddock/bus";
import type { Logger } from "@paddock/logging";
import type { RunnerMetrics } from "../metrics.ts";

export interface HeldCheckDeps {
  nc: NatsConnection;
  log: Logger;
  metrics: Pick<RunnerMetrics, "releasedByHeldCheck">;
  now: () => number;
  poolId: string;
  runnerId: string;
  /** Interval, and the least time a placement is held before it is asked about (ms); 0 disables. */
  intervalMs: number;
  /** The registration generation the check speaks for, or undefined while the runner is fenced or re-registering. */
  generation: () => number | undefined;
  /** Placements held since the given time or earlier. */
  heldSince: (before: number) => HeldSession[];
  /** Tears one placement down as a destroy command would (processes, directory, destroyed fact). */
  release: (held: HeldSession, runnerGeneration: number) => void;
}

export interface HeldCheck {
  /** Runs a check if the interval has passed since the last one and none is running. */
  maybeRun(): void;
  /** One check now; resolves with the placements it released. */
  run(): Promise<HeldSession[]>;
}

export function createHeldCheck(deps: HeldCheckDeps): HeldCheck {
  let lastAt = Number.NEGATIVE_INFINITY;
  let running: Promise<HeldSession[]> | undefined;

  const ask = async (generation: number, sessions: HeldSession[]): Promise<HeldSession[]> => {
    const reply = await callRpc(deps.nc, FleetRpc.heldCheck, { poolId: deps.poolId, runnerId: deps.runnerId, runnerGeneration: generation, sessions });
    return reply.ended;
  };

  const run = async (): Promise<HeldSession[]> => {
    const generation = deps.generation();
    if (generation === undefined) return [];
    const held = deps.heldSince(deps.now() - deps.intervalMs);
    const released: HeldSession[] = [];
    for (let i = 0; i < held.length; i += HELD_CHECK_MAX_SESSIONS) {
      const ended = await ask(generation, held.slice(i, i + HELD_CHECK_MAX_SESSIONS));
      // The runner may have been fenced while it asked: then the answer speaks for a superseded generation.
      if (deps.generation() !== generation) return released;
      for (const h of ended) {
        deps.metrics.releasedByHeldCheck.inc();
        deps.log.warn({ sessionId: h.sessionId, placementGeneration: h.placementGeneration }, "session ended without its teardown reaching this runner; tearing it down");
        deps.release(h, generation);
        released.push(h);
      }
    }
    return released;
  };

  return {
    run: () => (running ??= run().finally(() => (running = undefined))),
    maybeRun: () => {
      if (deps.intervalMs <= 0 || running || deps.now() - lastAt < deps.intervalMs) return;
      lastAt = deps.now();
      running = run()
        .catch((err: unknown) => {
          deps.log.warn({ err }, "held check failed; the next one asks again");
          return [];
        })
        .finally(() => (running = undefined));
    },
  };
}
