import type { JetStreamClient } from "@nats-io/jetstream";
import { RunnerFact, Subjects } from "@paddock/contracts";
import type { Encoder } from "@paddock/bus";
import type { Logger } from "@paddock/logging";
import type { HeldSession } from "@paddock/contracts";

type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;

/** The fact-specific fields; the publisher adds who, which generations and when. */
export type FactBody = DistributiveOmit<
  RunnerFact,
  "runnerId" | "poolId" | "runnerGeneration" | "sessionId" | "workspaceId" | "placementGeneration" | "at"
>;

export interface FactPublisherOptions {
  js: JetStreamClient;
  /** The bus's encoder (encoderOf): it checks outgoing messages as the bus says. */
  encode: Encoder;
  log: Logger;
  runnerId: string;
  poolId: string;
  runnerGeneration: () => number;
  now: () => number;
  isStopped: () => boolean;
  sleep: (ms: number) => Promise<void>;
}

export interface FactPublisher {
  /**
   * Publishes until committed (or the agent stops); resolves true once
   * committed. `key` tells apart facts of one type that may occur several
   * times per placement (a request id, an app generation). A fact carries
   * the runner generation it was produced under (`runnerGeneration`, else
   * the current one) and keeps it through every retry: one produced before
   * a re-registration is dropped by the scheduler's fence, never upgraded.
   */
  publish(session: HeldSession, body: FactBody, key?: string, runnerGeneration?: number): Promise<boolean>;
  /** The runner generation facts are produced under right now. */
  generation(): number;
}

/**
 * Runner facts go to JetStream with a message id of session, generation and
 * type (and a key where a type repeats), so a retry after a timeout (or a redelivered dispatch) never lands a
 * second copy inside the duplicate window.
 */
export function createFactPublisher(opts: FactPublisherOptions): FactPublisher {
  const subject = Subjects.runnerEvents(opts.poolId, opts.runnerId);
  return {
    generation: opts.runnerGeneration,
    publish: async (session, body, key, runnerGeneration) => {
      const fact = {
        ...body,
        runnerId: opts.runnerId,
        poolId: opts.poolId,
        runnerGeneration: runnerGeneration ?? opts.runnerGeneration(),
        sessionId: session.sessionId,
        workspaceId: session.workspaceId,
        placementGeneration: session.placementGeneration,
        at: opts.now(),
      };
      const data = opts.encode(RunnerFact, fact);
      const base = `${session.sessionId}-${session.placementGeneration}-${body.type}`;
      const msgID = key === undefined ? base : `${base}-${key}`;
      for (let attempt = 0; !opts.isStopped(); attempt++) {
        try {
          await opts.js.publish(subject, data, { msgID });
          return true;
        } catch (err) {
          if (attempt === 0) opts.log.warn({ err, sessionId: session.sessionId, type: body.type }, "fact publish failed; retrying");
          await opts.sleep(Math.min(100 * 2 ** Math.min(attempt, 5), 2_000));
        }
      }
      opts.log.warn({ sessionId: session.sessionId, type: body.type }, "fact not published: stopping");
      return false;
    },
  };
}
