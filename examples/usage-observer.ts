/**
 * Example observer: a running usage total per workspace from the AUDIT stream.
 *
 *   tsx examples/usage-observer.ts --nats "$PADDOCK_NATS_URL" --creds "$PADDOCK_OBSERVER_CREDS" --durable billing [--workspace ws1 ...]
 *
 * `npm run up` prints both: its NATS admits no anonymous client, and the
 * `observer` principal (`DATA_DIR/creds/observer.json`) may read AUDIT through
 * durables of its own and nothing else.
 *
 * It creates (or reuses) its OWN durable consumer on AUDIT — an observer never
 * shares the recorder's consumers — filtered to `paddock.audit.<ws>.>` for each
 * workspace it is given, or to every workspace's session events
 * (`paddock.audit.*.session.>`) when given none. For each event it adds the
 * event's `usage` to its workspace's total, then acks, and prints the totals
 * as one JSON line.
 *
 * Counting each event once:
 * - AUDIT holds each event once: the recorder publishes with the event id as
 *   message id and AUDIT drops a republish (see docs/audit.md).
 * - The observer acks only after applying, so an event is never skipped: a crash
 *   before the ack gets it redelivered. That alone would count it twice when the
 *   totals survived (they do across a lost ack, a nak or an ack_wait expiry within
 *   one process), so applied event ids are also kept in a bounded window
 *   (`windowSize`, FIFO): a redelivery whose id is in the window is acked without
 *   being applied. The window only needs to outlast the redelivery horizon
 *   (max_ack_pending plus in-flight messages), far smaller than its default.
 * - A real billing observer would store its totals and the applied ids (or the
 *   last applied stream sequence) in one transaction, so a restart neither
 *   loses nor repeats anything; this example keeps them in memory and, on a
 *   restart, a new durable name rebuilds the totals from the retained stream.
 */
import { resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { AckPolicy, DeliverPolicy, jetstream, jetstreamManager, type JsMsg } from "@nats-io/jetstream";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { AuditEvent, inboxPrefixOf, Streams, Subjects, ZERO_USAGE, type Usage } from "@paddock/contracts";
import { readNatsCredentials } from "@paddock/config";

export interface UsageObserverOptions {
  nc: NatsConnection;
  /** The observer's own durable consumer name on AUDIT. */
  durable: string;
  /** Workspaces to total; all workspaces' session events when empty. */
  workspaces?: readonly string[];
  /** How many applied event ids are remembered to skip redeliveries. */
  windowSize?: number;
  /** Called after each change of the totals. */
  onTotals?: (totals: ReadonlyMap<string, Usage>) => void;
  /**
   * Test hook: when it answers true for an applied event, the observer naks
   * instead of acking, as if the ack had been lost, so the event is redelivered.
   */
  loseAck?: (event: AuditEvent) => boolean;
}

export interface UsageObserver {
  readonly totals: ReadonlyMap<string, Usage>;
  /** Events applied (each counted once). */
  readonly applied: number;
  /** Deliveries skipped because the event was already applied. */
  readonly skipped: number;
  stop(): Promise<void>;
}

/** The filter subjects of the observer's consumer. */
export function filterSubjects(workspaces: readonly string[] = []): string[] {
  return workspaces.length ? workspaces.map((ws) => Subjects.auditWorkspace(ws)) : ["paddock.audit.*.session.>"];
}

export function addUsage(a: Usage, b: Usage): Usage {
  return {
    cpuTimeSeconds: a.cpuTimeSeconds + b.cpuTimeSeconds,
    memoryByteSeconds: a.memoryByteSeconds + b.memoryByteSeconds,
    storageBytes: a.storageBytes + b.storageBytes,
    networkBytes: a.networkBytes + b.networkBytes,
    agentTokenCount: a.agentTokenCount + b.agentTokenCount,
  };
}

/** Remembers the last `size` ids, oldest evicted first. */
class IdWindow {
  private readonly ids = new Set<string>();
  constructor(private readonly size: number) {}
  has(id: string): boolean {
    return this.ids.has(id);
  }
  add(id: string): void {
    this.ids.add(id);
    if (this.ids.size > this.size) {
      const oldest = this.ids.values().next().value;
      if (oldest !== undefined) this.ids.delete(oldest);
    }
  }
}

export async function startUsageObserver(opts: UsageObserverOptions): Promise<UsageObserver> {
  const jsm = await jetstreamManager(opts.nc);
  await jsm.consumers.add(Streams.audit, {
    durable_name: opts.durable,
    filter_subjects: filterSubjects(opts.workspaces),
    ack_policy: AckPolicy.Explicit,
    deliver_policy: DeliverPolicy.All,
    max_ack_pending: 256,
  });
  const consumer = await jetstream(opts.nc).consumers.get(Streams.audit, opts.durable);
  const messages = await consumer.consume({ max_messages: 256 });
  const totals = new Map<string, Usage>();
  const seen = new IdWindow(opts.windowSize ?? 100_000);
  const state = { applied: 0, skipped: 0 };

  const handle = (msg: JsMsg) => {
    const parsed = AuditEvent.safeParse(safeJson(msg.data));
    if (!parsed.success) {
      msg.term("not an AuditEvent");
      return;
    }
    const event = parsed.data;
    if (seen.has(event.id)) {
      state.skipped += 1;
      msg.ack();
      return;
    }
    totals.set(event.workspaceId, addUsage(totals.get(event.workspaceId) ?? ZERO_USAGE, event.usage));
    seen.add(event.id);
    state.applied += 1;
    opts.onTotals?.(totals);
    if (opts.loseAck?.(event)) msg.nak();
    else msg.ack();
  };

  const done = (async () => {
    for await (const msg of messages) handle(msg);
  })();
  return {
    totals,
    get applied() {
      return state.applied;
    },
    get skipped() {
      return state.skipped;
    },
    stop: async () => {
      await messages.close();
      await done;
    },
  };
}

function safeJson(data: Uint8Array): unknown {
  try {
    return JSON.parse(new TextDecoder().decode(data));
  } catch {
    return undefined;
  }
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      nats: { type: "string", default: process.env.PADDOCK_NATS_URL ?? "nats://127.0.0.1:4222" },
      // A credentials file ({"user","password"}, mode 0600); none connects anonymously.
      creds: { type: "string", default: process.env.PADDOCK_OBSERVER_CREDS },
      durable: { type: "string", default: "usage-observer" },
      workspace: { type: "string", multiple: true, default: [] },
    },
  });
  const creds = values.creds ? readNatsCredentials(values.creds) : undefined;
  // Replies come under the user's own inbox prefix: the only inbox its permissions let it read.
  const nc = await connect({ servers: values.nats, ...(creds ? { user: creds.user, pass: creds.password, inboxPrefix: inboxPrefixOf(creds.user) } : {}) });
  const observer = await startUsageObserver({
    nc,
    durable: values.durable,
    workspaces: values.workspace,
    onTotals: (totals) => process.stdout.write(JSON.stringify(Object.fromEntries(totals)) + "\n"),
  });
  const shutdown = async () => {
    await observer.stop();
    await nc.drain();
  };
  process.once("SIGINT", () => void shutdown());
  process.once("SIGTERM", () => void shutdown());
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main().catch((err: unknown) => {
    process.stderr.write(`usage-observer: ${String(err)}\n`);
    process.exit(1);
  });
}
