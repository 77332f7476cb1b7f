/**
 * Invariant checks shared by the scenarios, each an exact count read from the
 * stores after the faults (never sampled): audit one-to-one with committed
 * facts, one runner per placement generation, no sandbox process without a
 * live record, KV state unchanged.
 */
import { createHash } from "node:crypto";
import { readdirSync, readFileSync, readlinkSync } from "node:fs";
import { join, sep } from "node:path";
import { jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { Objm } from "@nats-io/obj";
import type { NatsConnection } from "@nats-io/transport-node";
import {
  AgentFact,
  AuditEvent,
  Buckets,
  DispatchCommand,
  kvStreamName,
  ObjectStores,
  occupiesSlot,
  sessionKey,
  Streams,
  type Environment,
  type Session,
} from "@paddock/contracts";
import { kvRevisions, parseJson, readStream, sleep, waitFor } from "./client.ts";
import type { Anomalies } from "./report.ts";
import type { ChaosStack } from "./stack.ts";

/** Whether every recorder feed consumer has delivered and had acked everything. */
export async function feedsDrained(nc: NatsConnection): Promise<boolean> {
  const jsm = await jetstreamManager(nc);
  for (const bucket of [Buckets.sessions, Buckets.environments, Buckets.runners]) {
    try {
      const info = await jsm.consumers.info(kvStreamName(bucket), "event-recorder");
      if (info.num_pending > 0 || info.num_ack_pending > 0) return false;
    } catch {
      return false;
    }
  }
  // Agents' facts: only once a recorder made its feed (a stack without agents' facts has nothing to wait for).
  const agents = await jsm.consumers.info(Streams.agents, "event-recorder").catch(() => undefined);
  if (agents && (agents.num_pending > 0 || agents.num_ack_pending > 0)) return false;
  return true;
}

/** Agents' facts (stream AGENTS): each is its own audited fact, its id the event's. */
async function noteAgentFacts(nc: NatsConnection, committed: Map<string, string>): Promise<void> {
  for (const m of await readStream(nc, Streams.agents).catch(() => [])) {
    const fact = AgentFact.safeParse(parseJson(m.data));
    if (fact.success) committed.set(fact.data.id, `agent ${fact.data.type} on ${m.subject}`);
  }
}

/** The buckets whose revisions carry audited facts (`lastFact`). */
const FACT_BUCKETS = [Buckets.sessions, Buckets.environments] as const;

/** Records the fact a revision carries: its event id → where it was committed. */
function noteFact(committed: Map<string, string>, bucket: string, r: { op: string; key: string; revision: number; value?: Session | Environment | undefined }): void {
  const id = r.value?.lastFact?.eventId;
  if (r.op === "PUT" && id && !committed.has(id)) committed.set(id, `${bucket}/${r.key}@${r.revision} ${r.value?.lastFact.action ?? ""}`);
}

/**
 * Audit: every committed revision of `sessions` and `environments` (its
 * lastFact) has exactly one event in AUDIT, and no event lacks a revision —
 * the comparison of test/e2e/audit.test.ts over whole streams. Waits for the
 * recorder's feeds to drain first (bounded).
 */
export async function checkAudit(nc: NatsConnection, anomalies: Anomalies, timeoutMs: number): Promise<{ facts: number; events: number; beyondHistory: number }> {
  const drained = await waitFor(() => feedsDrained(nc), timeoutMs, 250);
  const jsm = await jetstreamManager(nc);
  // A revision committed after the drain check is still in flight; read facts first, events after.
  const committed = new Map<string, string>();
  // Resources whose change feed holds as many revisions as it keeps: their oldest facts may be gone
  // from the feed (not from AUDIT), so an event of theirs without a retained revision is not evidence.
  const truncated = new Set<string>();
  for (const bucket of FACT_BUCKETS) {
    const keep = (await jsm.streams.info(kvStreamName(bucket))).config.max_msgs_per_subject;
    const perKey = new Map<string, { id: string | undefined; n: number }>();
    for (const r of await kvRevisions<Session | Environment>(nc, bucket)) {
      noteFact(committed, bucket, r);
      const k = perKey.get(r.key) ?? { id: undefined, n: 0 };
      perKey.set(r.key, { id: r.value?.id ?? k.id, n: k.n + 1 });
    }
    for (const { id, n } of perKey.values()) if (id !== undefined && keep > 0 && n >= keep) truncated.add(id);
  }
  await noteAgentFacts(nc, committed);
  await waitFor(() => feedsDrained(nc), timeoutMs, 250);
  const counts = new Map<string, number>();
  const resourceOf = new Map<string, string>();
  let events = 0;
  for (const m of await readStream(nc, Streams.audit)) {
    const parsed = AuditEvent.safeParse(parseJson(m.data));
    if (!parsed.success) {
      anomalies.add("audit events malformed", `seq ${m.seq} on ${m.subject}`);
      continue;
    }
    if (parsed.data.resource.kind === "runner") continue;
    events += 1;
    counts.set(parsed.data.id, (counts.get(parsed.data.id) ?? 0) + 1);
    resourceOf.set(parsed.data.id, parsed.data.resource.id);
  }
  if (!drained) anomalies.add("audit events missing", "the recorder's feeds never drained");
  for (const [id, what] of committed) if (!counts.has(id)) anomalies.add("audit events missing", `${id} (${what})`);
  // A fact committed after the first read (a runner's late teardown report, say) has its event
  // read above: look for the events' facts once more before calling any of them uncommitted.
  if ([...counts.keys()].some((id) => !committed.has(id))) {
    for (const bucket of FACT_BUCKETS) for (const r of await kvRevisions<Session | Environment>(nc, bucket)) noteFact(committed, bucket, r);
    await noteAgentFacts(nc, committed);
  }
  let beyondHistory = 0;
  for (const [id, n] of counts) {
    if (n > 1) anomalies.add("audit events duplicated", `${id} ×${n}`, n - 1);
    if (committed.has(id)) continue;
    if (truncated.has(resourceOf.get(id) ?? "")) beyondHistory += 1;
    else anomalies.add("audit events without a committed fact", `${id} (resource ${resourceOf.get(id) ?? "?"})`);
  }
  return { facts: committed.size, events, beyondHistory };
}

/**
 * No session placed on two runners in one placement generation: from every
 * `start` ever dispatched (the DISPATCH subject names the runner) and from
 * the record history (a generation's revisions all name one runner).
 */
export async function checkPlacedOnce(nc: NatsConnection, anomalies: Anomalies, sessionIds?: ReadonlySet<string>): Promise<void> {
  const targets = new Map<string, Set<string>>();
  for (const m of await readStream(nc, Streams.dispatch)) {
    const cmd = DispatchCommand.safeParse(parseJson(m.data));
    if (!cmd.success || cmd.data.type !== "start") continue;
    if (sessionIds && !sessionIds.has(cmd.data.sessionId)) continue;
    const key = `${cmd.data.sessionId} generation ${cmd.data.placementGeneration}`;
    (targets.get(key) ?? targets.set(key, new Set()).get(key))?.add(m.subject);
  }
  for (const r of await kvRevisions<Session>(nc, Buckets.sessions)) {
    const s = r.value;
    if (!s?.runnerId || !occupiesSlot(s.state) || (sessionIds && !sessionIds.has(s.id))) continue;
    const key = `${s.id} generation ${s.placementGeneration}`;
    (targets.get(key) ?? targets.set(key, new Set()).get(key))?.add(`record:${s.poolId ?? ""}.${s.runnerId}`);
  }
  for (const [key, where] of targets) {
    const runners = new Set([...where].map(poolAndRunner));
    if (runners.size > 1) anomalies.add("placed twice in one generation", `${key}: ${[...where].join(", ")}`);
  }
}

/** `<pool>.<runner>` of a DISPATCH subject (`paddock.dispatch.<pool>.<runner>`) or a `record:<pool>.<runner>` entry: a runner id is unique within its pool only. */
function poolAndRunner(where: string): string {
  return where.startsWith("record:") ? where.slice("record:".length) : where.split(".").slice(-2).join(".");
}

export interface SandboxProcess {
  pid: number;
  sessionId: string;
  runnerId: string;
  cmdline: string;
}

/**
 * Sandbox processes of this stack on the host: every process whose env names
 * a session (PADDOCK_SESSION_ID, set by the runner on every app) and that
 * belongs to one of this stack's runners: its working directory is under the
 * runner's data dir (process backend), or it or an ancestor was started with
 * an argv naming that dir (bwrap: its cwd is the workspace as the sandbox
 * sees it, and its launch chain binds the session's directories by host
 * path). Zombies are skipped (their parent reaps them).
 */
export function sandboxProcesses(stack: ChaosStack): SandboxProcess[] {
  const out: SandboxProcess[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(join("/proc", entry, "stat"), "utf8");
      if (stat.slice(stat.lastIndexOf(")") + 2).startsWith("Z")) continue;
      const env = readFileSync(join("/proc", entry, "environ"), "latin1").split("\0");
      const sid = env.find((e) => e.startsWith("PADDOCK_SESSION_ID="))?.slice("PADDOCK_SESSION_ID=".length);
      if (!sid) continue;
      const cwd = readlinkSync(join("/proc", entry, "cwd"));
      const runnerId = stack.runnerIds.find((id) => cwd.startsWith(stack.runnerDir(id) + sep)) ?? launchedBy(stack, Number(entry));
      if (!runnerId) continue;
      const cmdline = readFileSync(join("/proc", entry, "cmdline"), "latin1").split("\0").join(" ").trim().slice(0, 120);
      out.push({ pid: Number(entry), sessionId: sid, runnerId, cmdline });
    } catch {
      // gone meanwhile, or not ours to read
    }
  }
  return out;
}

/** The runner whose data dir the argv of pid or of one of its ancestors names (a bwrap launch chain). */
function launchedBy(stack: ChaosStack, pid: number): string | undefined {
  for (let p = pid, hops = 0; p > 1 && hops < 8; hops++) {
    try {
      const argv = readFileSync(join("/proc", String(p), "cmdline"), "latin1");
      const runnerId = stack.runnerIds.find((id) => argv.includes(stack.runnerDir(id) + sep));
      if (runnerId) return runnerId;
      p = Number(/^PPid:\s+(\d+)$/m.exec(readFileSync(join("/proc", String(p), "status"), "utf8"))?.[1] ?? 0);
    } catch {
      return undefined;
    }
  }
  return undefined;
}

/** Sandbox processes whose session has no live record placing it on that runner. */
export async function orphanProcesses(stack: ChaosStack, nc: NatsConnection, workspaceId: string): Promise<SandboxProcess[]> {
  const kv = await new Kvm(nc).open(Buckets.sessions);
  const orphans: SandboxProcess[] = [];
  for (const p of sandboxProcesses(stack)) {
    const e = await kv.get(sessionKey(workspaceId, p.sessionId));
    const s = e && e.operation === "PUT" ? e.json<Session>() : undefined;
    if (!s || !occupiesSlot(s.state) || s.runnerId !== p.runnerId) orphans.push(p);
  }
  return orphans;
}

/** Counts orphans once teardown had time to finish (polls up to settleMs for the count to reach zero). */
export async function checkOrphans(stack: ChaosStack, nc: NatsConnection, workspaceId: string, anomalies: Anomalies, settleMs: number): Promise<number> {
  let orphans = await orphanProcesses(stack, nc, workspaceId);
  const deadline = Date.now() + settleMs;
  while (orphans.length > 0 && Date.now() < deadline) {
    await sleep(500);
    orphans = await orphanProcesses(stack, nc, workspaceId);
  }
  for (const o of orphans) anomalies.add("orphan processes", `pid ${o.pid} session ${o.sessionId} under ${o.runnerId}: ${o.cmdline}`);
  return orphans.length;
}

/**
 * Key → revision and digest of every bucket, plus every object store entry:
 * what "state" means for bad input. A KV value that is a JSON object is kept
 * too, so a change can name the fields it touched.
 */
export type StateSnapshot = Map<string, { summary: string; fields?: Record<string, unknown> }>;

const STATE_BUCKETS = [
  Buckets.sessions,
  Buckets.webhooks,
  Buckets.workspaces,
  Buckets.runners,
  Buckets.environments,
  Buckets.idempotency,
  Buckets.names,
  Buckets.tokens,
  Buckets.members,
  Buckets.secrets,
] as const;

export async function snapshotState(nc: NatsConnection): Promise<StateSnapshot> {
  const out: StateSnapshot = new Map();
  const kvm = new Kvm(nc);
  for (const bucket of STATE_BUCKETS) {
    const kv = await kvm.open(bucket);
    const keys = new Set<string>();
    for await (const k of await kv.keys()) keys.add(k);
    for (const k of keys) {
      const e = await kv.get(k);
      if (!e || e.operation !== "PUT") continue;
      const summary = `rev ${e.revision} sha ${createHash("sha256").update(e.value).digest("hex").slice(0, 16)}`;
      out.set(`kv ${bucket} ${k}`, { summary, fields: jsonObjectOf(e.value) });
    }
  }
  const objm = new Objm(nc);
  // The shared stores and every runner's own (checkpoints-<runner user>, env-snapshots-<runner user>).
  const stores = new Set<string>(Object.values(ObjectStores));
  for await (const status of objm.list()) stores.add(status.bucket);
  for (const store of [...stores].sort()) {
    const os = await objm.open(store);
    for (const info of await os.list()) if (!info.deleted) out.set(`obj ${store} ${info.name}`, { summary: `${info.size} ${info.digest}` });
  }
  // Agents' facts: a log per session; a refused call appends nothing.
  const agents = await (await jetstreamManager(nc)).streams.info(Streams.agents, { subjects_filter: ">" });
  for (const [subject, count] of Object.entries(agents.state.subjects ?? {})) out.set(`stream ${Streams.agents} ${subject}`, { summary: `${count} facts` });
  return out;
}

export function diffState(before: StateSnapshot, after: StateSnapshot): string[] {
  const out: string[] = [];
  for (const [k, v] of before) {
    const now = after.get(k);
    if (now === undefined) out.push(`${k} removed`);
    else if (now.summary !== v.summary) out.push(`${k} changed (${v.summary} → ${now.summary})${fieldsChanged(v.fields, now.fields)}`);
  }
  for (const [k, v] of after) if (!before.has(k)) out.push(`${k} added (${v.summary})`);
  return out;
}

function jsonObjectOf(value: Uint8Array): Record<string, unknown> | undefined {
  try {
    const parsed: unknown = JSON.parse(new TextDecoder().decode(value));
    return parsed !== null && typeof parsed === "object" && !Array.isArray(parsed) ? (parsed as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The top-level fields that differ, and the fact that made the change when
 * the value is a session record. Names only, never values: a bucket may hold
 * ciphertext or token hashes.
 */
function fieldsChanged(before: Record<string, unknown> | undefined, after: Record<string, unknown> | undefined): string {
  if (!before || !after) return "";
  const names = [...new Set([...Object.keys(before), ...Object.keys(after)])].filter((n) => JSON.stringify(before[n]) !== JSON.stringify(after[n]));
  const fact = after.lastFact as { action?: unknown; actorId?: unknown } | undefined;
  const by = names.includes("lastFact") && fact ? `; last fact ${String(fact.action)} by ${String(fact.actorId)}` : "";
  return `: fields ${names.join(", ")}${by}`;
}
