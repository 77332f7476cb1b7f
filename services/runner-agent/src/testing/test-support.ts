/**
 * Shared scaffolding for this service's tests: a stand-in scheduler answering
 * registration, fact and terminal collectors that resolve on messages.
 */
import { mkdtempSync, readFileSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { gzipSync } from "node:zlib";
import { sealStream } from "@paddock/archive";
import { connect, type Msg, type NatsConnection, type Subscription } from "@nats-io/transport-node";
import { Kvm } from "@nats-io/kv";
import {
  Buckets,
  HeldCheckReply,
  HeldCheckRequest,
  PlacementCheckReply,
  SessionSecretsReply,
  SessionSecretsRequest,
  PlacementCheckRequest,
  replyEnvelope,
  RegisterRunnerReply,
  RegisterRunnerRequest,
  Runner,
  RunnerFact,
  runnerKey,
  parseRegisterSubject,
  Subjects,
  Headers,
  type HeldSession,
  type KeptSession,
} from "@paddock/contracts";
import { decodeJson, encodeJson, provision } from "@paddock/bus";
import { jetstream } from "@nats-io/jetstream";
import { DispatchCommand } from "@paddock/contracts";
import { silentLogger, type Logger } from "@paddock/logging";
import { afterAll, beforeAll } from "vitest";
import { makeRunner, startNatsServer, type NatsServerHandle } from "@paddock/testing";
import { createRunnerAgent, type AgentConfig, type RunnerAgent, type RunnerAgentDeps } from "../agent.ts";
import { createRunnerMetrics, type RunnerMetrics } from "../metrics.ts";
import { PROCESS_SANDBOX, type SandboxSettings } from "../sandbox-choice.ts";
import { pidsOfUid } from "../sandbox/bwrap/uid-allocator.ts";

/** What test agents run sessions in: bwrap, a runner's default (a host where it does not work fails loudly). */
export const TEST_SANDBOX: SandboxSettings = { ...PROCESS_SANDBOX, backend: "bwrap" };

/** Collects items and resolves waiters whose predicate matches (already seen or future). */
export class Collector<T> {
  readonly items: T[] = [];
  private waiters: Array<{ pred: (t: T) => boolean; resolve: (t: T) => void }> = [];

  push(item: T): void {
    this.items.push(item);
    for (const w of [...this.waiters]) {
      if (w.pred(item)) {
        this.waiters.splice(this.waiters.indexOf(w), 1);
        w.resolve(item);
      }
    }
  }

  waitFor(pred: (t: T) => boolean): Promise<T> {
    const seen = this.items.find(pred);
    if (seen) return Promise.resolve(seen);
    return new Promise((resolve) => this.waiters.push({ pred, resolve }));
  }
}

export interface FakeScheduler {
  requests: Collector<RegisterRunnerRequest>;
  /** The generation the stand-in treats as stored. */
  stored: number;
  destroy: HeldSession[];
  /** Answers placement checks (terminal-log fence resolution); every placement is current unless a test says otherwise. */
  isCurrent: (req: PlacementCheckRequest) => boolean;
  /** The `kept` of an accepted registration's reply (none unless a test says otherwise). */
  kept: (req: RegisterRunnerRequest) => KeptSession[] | undefined;
  /** Held checks received; `ended` answers them (nothing ended unless a test says otherwise). */
  heldChecks: Collector<HeldCheckRequest>;
  ended: (req: HeldCheckRequest) => HeldSession[];
  /**
   * Answers a boot's secrets and token call (`FleetRpc.sessionSecrets`) when a
   * test sets it; unset, the call goes unanswered (in-process agents use
   * noSecrets and never ask; a runner process always does).
   */
  boot: ((req: SessionSecretsRequest) => SessionSecretsReply) | undefined;
  /** One subscription for every fleet call (registration, placement and held checks). */
  sub: Subscription;
}

/**
 * Answers registration like the scheduler: accept a claim above the stored
 * generation, and write the runner record (KV `runners`) before answering,
 * as the scheduler does; the runner reads it on every lease renewal.
 */
export function fakeScheduler(nc: NatsConnection, stored = 0): FakeScheduler {
  const fake: FakeScheduler = { requests: new Collector(), stored, destroy: [], isCurrent: () => true, kept: () => undefined, heldChecks: new Collector(), ended: () => [], boot: undefined, sub: undefined as never };
  fake.sub = nc.subscribe("paddock.fleet.v1.>", {
    callback: (_err, msg) => {
      if (msg.subject === Subjects.placementCheck) {
        const check = decodeJson(PlacementCheckRequest, msg.data);
        if (check.ok) msg.respond(encodeJson(replyEnvelope(PlacementCheckReply), { ok: true, result: { current: fake.isCurrent(check.value) } }));
        return;
      }
      if (msg.subject === Subjects.heldCheck) {
        const check = decodeJson(HeldCheckRequest, msg.data);
        if (!check.ok) return;
        fake.heldChecks.push(check.value);
        msg.respond(encodeJson(replyEnvelope(HeldCheckReply), { ok: true, result: { ended: fake.ended(check.value) } }));
        return;
      }
      if (msg.subject === Subjects.secrets) {
        const ask = decodeJson(SessionSecretsRequest, msg.data);
        if (ask.ok && fake.boot) msg.respond(encodeJson(replyEnvelope(SessionSecretsReply), { ok: true, result: fake.boot(ask.value) }));
        return;
      }
      if (parseRegisterSubject(msg.subject) === undefined) return;
      const req = decodeJson(RegisterRunnerRequest, msg.data);
      if (!req.ok) return;
      const accepted = req.value.generation > fake.stored;
      if (accepted) fake.stored = req.value.generation;
      const destroy = accepted ? fake.destroy : [];
      void (async () => {
        if (accepted) await writeRunnerRecord(nc, req.value, fake.stored);
        const kept = accepted ? fake.kept(req.value) : undefined;
        msg.respond(encodeJson(RegisterRunnerReply, { accepted, generation: fake.stored, destroy, ...(kept ? { kept } : {}) }));
        fake.requests.push(req.value);
      })();
    },
  });
  return fake;
}

async function writeRunnerRecord(nc: NatsConnection, req: RegisterRunnerRequest, generation: number): Promise<void> {
  const kv = await new Kvm(nc).open(Buckets.runners);
  const record = makeRunner({
    id: req.runnerId,
    poolId: req.poolId,
    generation,
    capacityTotal: req.capacityTotal,
    capabilities: req.capabilities,
    resources: req.resources,
  });
  await kv.put(runnerKey(req.poolId, req.runnerId), encodeJson(Runner, record));
}

/** What the scheduler does when a runner's lease expired: mark its record lost (the generation stays). */
export async function markLost(nc: NatsConnection, poolId: string, runnerId: string): Promise<void> {
  const kv = await new Kvm(nc).open(Buckets.runners);
  const key = runnerKey(poolId, runnerId);
  const entry = await kv.get(key);
  const current = decodeJson(Runner, entry?.value ?? new Uint8Array());
  if (!entry || !current.ok) throw new Error(`no runner record for ${key}`);
  await kv.update(key, encodeJson(Runner, { ...current.value, state: "lost", lostReason: "lease expired" }), entry.revision);
}

export function collectFacts(nc: NatsConnection, poolId: string, runnerId: string): Collector<RunnerFact> {
  const facts = new Collector<RunnerFact>();
  nc.subscribe(Subjects.runnerEvents(poolId, runnerId), {
    callback: (_err, msg) => {
      const fact = decodeJson(RunnerFact, msg.data);
      if (fact.ok) facts.push(fact.value);
    },
  });
  return facts;
}

export interface TermMsg {
  body: Buffer;
  generation: string | undefined;
  exitCode: string | undefined;
  stream: string | undefined;
}

/** Live terminal messages of one app (core subscription; JetStream publishes reach it too). */
export function collectTerm(nc: NatsConnection, sessionId: string, app: string): Collector<TermMsg> & { text(): string } {
  const term = Object.assign(new Collector<TermMsg>(), {
    text(): string {
      return Buffer.concat(term.items.map((m) => m.body)).toString("utf8");
    },
  });
  nc.subscribe(Subjects.termOfApp(sessionId, app), {
    callback: (_err, msg: Msg) => {
      term.push({
        body: Buffer.from(msg.data),
        generation: msg.headers?.get(Headers.placementGeneration),
        exitCode: msg.headers?.has(Headers.exitCode) ? msg.headers.get(Headers.exitCode) : undefined,
        stream: msg.headers?.has(Headers.stream) ? msg.headers.get(Headers.stream) : undefined,
      });
    },
  });
  return term;
}

export interface TestAgent {
  agent: RunnerAgent;
  metrics: RunnerMetrics;
  config: AgentConfig;
}

let counter = 0;

export function testAgent(
  nc: NatsConnection,
  overrides: Partial<AgentConfig> = {},
  log: Logger = silentLogger(),
  extra: Partial<Pick<RunnerAgentDeps, "onRegistered" | "secrets" | "now">> = {},
): TestAgent {
  counter += 1;
  const config: AgentConfig = {
    runnerId: `r${counter}-${process.pid}`,
    poolId: "default",
    capacityTotal: 8,
    capabilities: ["process"],
    dataDir: mkdtempSync(join(tmpdir(), "paddock-runner-")),
    leaseRenewMs: 60_000,
    leaseTtlMs: 120_000,
    cpuMillis: 2_000,
    memoryBytes: 1 << 30,
    diskBytes: undefined,
    killGraceMs: 2_000,
    registerTimeoutMs: 2_000,
    childPath: process.env.PATH ?? "/usr/bin:/bin",
    gatewayUrl: "http://gateway.test:8080",
    watchDebounceMs: 50,
    watchMaxReloads: 10,
    watchWindowMs: 60_000,
    sandbox: TEST_SANDBOX,
    ...overrides,
  };
  const metrics = createRunnerMetrics();
  let ids = 0;
  const agent = createRunnerAgent({
    nc,
    config,
    log,
    metrics,
    now: () => 1_700_000_000_000,
    newId: () => `id${++ids}`,
    sleep: () => new Promise((resolve) => setImmediate(resolve)),
    ...extra,
  });
  return { agent, metrics, config };
}

export async function counterValue(counter: { get(): Promise<{ values: Array<{ value: number }> }> }): Promise<number> {
  return (await counter.get()).values.reduce((sum, v) => sum + v.value, 0);
}

/** Publishes a dispatch command to the agent's subject. */
export async function dispatchTo(nc: NatsConnection, t: TestAgent, cmd: DispatchCommand): Promise<void> {
  await jetstream(nc).publish(Subjects.dispatch(t.config.poolId, t.config.runnerId), encodeJson(DispatchCommand, cmd));
}

/**
 * Re-checks a condition on state the test cannot subscribe to (a process's
 * /proc state, a metric) until it holds; fails after many attempts.
 */
export async function eventually(check: () => boolean | Promise<boolean>, what: string | (() => string), attempts = 500): Promise<void> {
  for (let i = 0; i < attempts; i++) {
    if (await check()) return;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  throw new Error(`never happened: ${typeof what === "string" ? what : what()}`);
}

/** One ustar header + body, written by hand so the test controls every field a real tool would sanitize. */
export function tarEntry(name: string, opts: { type?: string; body?: string; linkname?: string } = {}): Buffer {
  const body = Buffer.from(opts.body ?? "");
  const h = Buffer.alloc(512, 0);
  const put = (value: string, offset: number, length: number) => h.write(value, offset, length, "utf8");
  const octal = (n: number, length: number) => n.toString(8).padStart(length - 1, "0") + "\0";
  put(name, 0, 100);
  put(octal(0o644, 8), 100, 8);
  put(octal(0, 8), 108, 8);
  put(octal(0, 8), 116, 8);
  put(octal(body.length, 12), 124, 12);
  put(octal(0, 12), 136, 12);
  put("        ", 148, 8);
  put(opts.type ?? "0", 156, 1);
  put(opts.linkname ?? "", 157, 100);
  put("ustar\0", 257, 6);
  put("00", 263, 2);
  let sum = 0;
  for (const b of h) sum += b;
  put(sum.toString(8).padStart(6, "0") + "\0 ", 148, 8);
  const padded = Buffer.alloc(Math.ceil(body.length / 512) * 512, 0);
  body.copy(padded);
  return Buffer.concat([h, padded]);
}

export function maliciousTar(...entries: Buffer[]): Buffer {
  return gzipSync(Buffer.concat([...entries, Buffer.alloc(1024, 0)]));
}


/** Bytes sealed as a checkpoint object named `ref` is (what a runner's save writes). */
export async function sealBytes(key: Buffer, ref: string, plain: Uint8Array): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const part of Readable.from([plain]).pipe(sealStream(key, ref))) parts.push(part as Buffer);
  return Buffer.concat(parts);
}

const SIGKILL_BIT = 1n << 8n;

/** Still running: not gone, not a zombie, and no SIGKILL pending (one pending is death the kernel has yet to schedule). */
export function stillRuns(pid: number): boolean {
  let status: string;
  try {
    status = readFileSync(`/proc/${pid}/status`, "utf8");
  } catch {
    return false;
  }
  if (/^State:\s+[ZX]/m.test(status)) return false;
  const pending = [...status.matchAll(/^(?:SigPnd|ShdPnd):\s+([0-9a-f]+)$/gm)].map((m) => BigInt(`0x${m[1]}`));
  return !pending.some((mask) => (mask & SIGKILL_BIT) !== 0n);
}

/**
 * A nats-server (provisioned, one replica) for one test file and the agents
 * its tests start; all are stopped after the file.
 */
export function agentTestServer(): { readonly nc: NatsConnection; agents: TestAgent[] } {
  let server: NatsServerHandle | undefined;
  let conn: NatsConnection | undefined;
  const env = {
    agents: [] as TestAgent[],
    get nc(): NatsConnection {
      if (!conn) throw new Error("the test server is not up yet (use it inside tests)");
      return conn;
    },
  };
  beforeAll(async () => {
    server = await startNatsServer();
    conn = await connect({ servers: server.url });
    await provision(conn, { replicas: 1 });
  });
  afterAll(async () => {
    for (const t of env.agents) await t.agent.stop();
    await conn?.drain();
    await server?.stop();
  });
  return env;
}

/**
 * The host pid of a session's process, given its pid as the session sees it
 * (what it printed or wrote): on bwrap the session has a pid namespace of
 * its own, so the last NSpid of the process, run by the uid owning the
 * session's directory; on process the two are the same. Each app of a
 * session has a pid namespace of its own: `cmdlineHas` tells apps apart.
 */
export function hostPidOf(t: TestAgent, sessionId: string, insidePid: number, cmdlineHas = ""): number {
  const uid = statSync(join(t.config.dataDir, "sessions", sessionId)).uid;
  const found = pidsOfUid(uid, { live: true }).filter((pid) => {
    const nspid = nsPidsOf(pid);
    if (nspid.at(-1) !== insidePid || (uid === process.getuid?.() && nspid.length > 1)) return false;
    return cmdlineHas === "" || cmdlineOf(String(pid)).includes(cmdlineHas);
  });
  if (found.length !== 1) throw new Error(`session ${sessionId}'s pid ${insidePid} is ${found.length === 0 ? "no process" : `several processes (${found.join(", ")})`} of uid ${uid}`);
  return found[0]!;
}

/** A process's pids, outermost namespace first (empty once it is gone). */
function nsPidsOf(pid: number): number[] {
  try {
    return /^NSpid:\s+(.*)$/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1]?.trim().split(/\s+/).map(Number) ?? [];
  } catch {
    return [];
  }
}

function cmdlineOf(pid: string): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8");
  } catch {
    return "";
  }
}
