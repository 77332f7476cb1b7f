import { jetstream } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/transport-node";
import { Session } from "@paddock/contracts";

/**
 * Resolves with the first revision of the session's record (KV `sessions`,
 * any workspace) that satisfies pred, each decoded through the Session
 * schema, so a record the contract refuses fails the test. A KV watch: every
 * revision from the current one on, no polling. The watch's JetStream API
 * calls get a long bound: right after a broker restart on a loaded machine
 * the server answers them late (its streams are still being recovered), not never.
 */
export async function untilSession(nc: NatsConnection, id: string, pred: (s: Session) => boolean): Promise<Session> {
  const kv = await new Kvm(jetstream(nc, { timeout: 30_000 })).open("sessions");
  const watch = await kv.watch({ key: `*.${id}` });
  try {
    for await (const e of watch) {
      if (e.operation !== "PUT") continue;
      const s = Session.parse(e.json());
      if (pred(s)) return s;
    }
  } finally {
    watch.stop();
  }
  throw new Error(`watch of session ${id} ended before the condition held`);
}
