import type { JetStreamClient } from "@nats-io/jetstream";
import { RunnerFact, Subjects } from "@paddock/contracts";
import { encodeJson } from "@paddock/bus";
import type { Logger } from "@paddock/logging";
import type { HeldSession } from "./types.ts";

/** The fact-specific fields; the publisher adds who, which generations and when. */
export type FactBody =
  | { type: "running" }
  | { type: "destroyed" }
  | { type: "failed"; reason: string }
  | { type: "exited"; exitCode: number | null; signal?: string };

export interface FactPublisherOptions {
  js: JetStreamClient;
  log: Logger;
  runnerId: string;
  poolId: string;
  runnerGeneration: () => number;
  now: () => number;
  isStopped: () => boolean;
  sleep: (ms: number) => Promise<void>;
}

export interface FactPublisher {
  /** Publishes until committed (or the agent stops); resolves true once committed. */
  publish(session: HeldSession, body: FactBody): Promise<boolean>;
}

/**
 * Runner facts go to JetStream with a message id of session, generation and
 * type, so a retry after a timeout (or a redelivered dispatch) never lands a
 * second copy inside the duplicate window.
 */
export function createFactPublisher(opts: FactPublisherOptions): FactPublisher {
  const subject = Subjects.runnerEvents(opts.poolId, opts.runnerId);
  return {
    publish: async (session, body) => {
      const fact = {
        ...body,
        runnerId: opts.runnerId,
        poolId: opts.poolId,
        runnerGeneration: opts.runnerGeneration(),
        sessionId: session.sessionId,
        workspaceId: session.workspaceId,
        placementGeneration: session.placementGeneration,
        at: opts.now(),
      };
      const data = encodeJson(RunnerFact, fact);
      const msgID = `${session.sessionId}-${session.placementGeneration}-${body.type}`;
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
