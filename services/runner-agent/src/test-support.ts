/**
 * Shared scaffolding for this service's tests: a stand-in scheduler answering
 * registration, fact and terminal collectors that resolve on messages.
 */
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Msg, NatsConnection, Subscription } from "@nats-io/transport-node";
import {
  RegisterRunnerReply,
  RegisterRunnerRequest,
  RunnerFact,
  Subjects,
  Headers,
} from "@paddock/contracts";
import { decodeJson, encodeJson } from "@paddock/bus";
import { silentLogger } from "@paddock/logging";
import { createRunnerAgent, type AgentConfig, type RunnerAgent } from "./agent.ts";
import { createRunnerMetrics, type RunnerMetrics } from "./metrics.ts";
import type { HeldSession } from "./types.ts";

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
  sub: Subscription;
}

/** Answers registration like the scheduler: accept a claim above the stored generation. */
export function fakeScheduler(nc: NatsConnection, stored = 0): FakeScheduler {
  const fake: FakeScheduler = { requests: new Collector(), stored, destroy: [], sub: undefined as never };
  fake.sub = nc.subscribe(Subjects.register, {
    callback: (_err, msg) => {
      const req = decodeJson(RegisterRunnerRequest, msg.data);
      if (!req.ok) return;
      const accepted = req.value.generation > fake.stored;
      if (accepted) fake.stored = req.value.generation;
      msg.respond(encodeJson(RegisterRunnerReply, { accepted, generation: fake.stored, destroy: accepted ? fake.destroy : [] }));
      fake.requests.push(req.value);
    },
  });
  return fake;
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
}

/** Live terminal messages of one app (core subscription; JetStream publishes reach it too). */
export function collectTerm(nc: NatsConnection, sessionId: string, app: string): Collector<TermMsg> & { text(): string } {
  const term = Object.assign(new Collector<TermMsg>(), {
    text(): string {
      return Buffer.concat(term.items.map((m) => m.body)).toString("utf8");
    },
  });
  nc.subscribe(Subjects.term(sessionId, app), {
    callback: (_err, msg: Msg) => {
      term.push({
        body: Buffer.from(msg.data),
        generation: msg.headers?.get(Headers.placementGeneration),
        exitCode: msg.headers?.has(Headers.exitCode) ? msg.headers.get(Headers.exitCode) : undefined,
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

export function testAgent(nc: NatsConnection, overrides: Partial<AgentConfig> = {}): TestAgent {
  counter += 1;
  const config: AgentConfig = {
    runnerId: `r${counter}-${process.pid}`,
    poolId: "default",
    capacityTotal: 8,
    capabilities: ["process"],
    dataDir: mkdtempSync(join(tmpdir(), "paddock-runner-")),
    leaseRenewMs: 60_000,
    killGraceMs: 2_000,
    registerTimeoutMs: 2_000,
    childPath: process.env.PATH ?? "/usr/bin:/bin",
    ...overrides,
  };
  const metrics = createRunnerMetrics();
  let ids = 0;
  const agent = createRunnerAgent({
    nc,
    config,
    log: silentLogger(),
    metrics,
    now: () => 1_700_000_000_000,
    newId: () => `id${++ids}`,
    sleep: () => new Promise((resolve) => setImmediate(resolve)),
  });
  return { agent, metrics, config };
}

export async function counterValue(counter: { get(): Promise<{ values: Array<{ value: number }> }> }): Promise<number> {
  return (await counter.get()).values.reduce((sum, v) => sum + v.value, 0);
}
