import { AckPolicy, DeliverPolicy, jetstream, jetstreamManager, type JsMsg } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { Counter, type Registry } from "prom-client";
import {
  AuditActionSchema,
  AuditEvent,
  Buckets,
  kvStreamName,
  Session,
  Subjects,
  ZERO_USAGE,
  PaddockError,
} from "@paddock/contracts";
import { consumeTyped, encodeJson, type BusMetrics, type ConsumerHandle } from "@paddock/bus";
import type { Logger } from "@paddock/logging";

export interface RecorderDeps {
  nc: NatsConnection;
  log: Logger;
  bus: BusMetrics;
  registry: Registry;
}

/** The durable all recorder replicas share on the sessions change feed. */
export const SESSIONS_FEED_CONSUMER = "event-recorder";

/**
 * The audit event a session revision commits. The record carries its own
 * fact (lastFact), so the event is derived from one write, never a second
 * independent one that could be lost.
 */
export function auditEventOf(s: Session): AuditEvent {
  const action = AuditActionSchema.safeParse(s.lastFact.action);
  if (!action.success) throw new PaddockError("invalid", "record carries an unknown action");
  return {
    id: s.lastFact.eventId,
    workspaceId: s.workspaceId,
    actorId: s.lastFact.actorId,
    action: action.data,
    resource: { kind: "session", workspaceId: s.workspaceId, id: s.id, creatorId: s.creatorId },
    at: s.lastFact.at,
    usage: ZERO_USAGE,
    placementGeneration: s.placementGeneration,
  };
}

function isDeleteMarker(msg: JsMsg): boolean {
  const op = msg.headers?.get("KV-Operation");
  return op === "DEL" || op === "PURGE" || msg.data.length === 0;
}

async function ensureFeedConsumer(nc: NatsConnection): Promise<void> {
  const jsm = await jetstreamManager(nc);
  await jsm.consumers.add(kvStreamName(Buckets.sessions), {
    durable_name: SESSIONS_FEED_CONSUMER,
    ack_policy: AckPolicy.Explicit,
    deliver_policy: DeliverPolicy.All,
    ack_wait: 30_000_000_000,
    max_deliver: -1,
    max_ack_pending: 1024,
  });
}

/**
 * Turns every revision of every session record into exactly one audit event:
 * published with the fact's event id as message id (AUDIT dedupes a republish
 * after a crash between publish and ack), and acked only after the publish is.
 */
export async function createRecorder(deps: RecorderDeps): Promise<{ stop(): Promise<void> }> {
  const js = jetstream(deps.nc);
  const recorded = new Counter({ name: "paddock_audit_events_total", help: "Audit events published", registers: [deps.registry] });
  await ensureFeedConsumer(deps.nc);
  const handle: ConsumerHandle = await consumeTyped(js, {
    stream: kvStreamName(Buckets.sessions),
    consumer: SESSIONS_FEED_CONSUMER,
    schema: Session,
    metrics: deps.bus,
    log: deps.log,
    skip: isDeleteMarker,
    handler: async (session) => {
      const event = auditEventOf(session);
      await js.publish(Subjects.audit(event.workspaceId, event.resource.kind, event.resource.id), encodeJson(AuditEvent, event), {
        msgID: event.id,
      });
      recorded.inc();
    },
  });
  return { stop: () => handle.stop() };
}
