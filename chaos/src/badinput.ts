/**
 * Scenario 4, bad input: seeded malformed inputs against every HTTP route,
 * WebSocket frame type and NATS subject the services consume. Counts
 * crashes (a service process exiting), 5xx answers (and the bus's
 * `internal` replies, 1011 closes), and state changes: KV buckets and object
 * stores are compared before and after, outside the keys the scenario
 * itself planted malformed values under.
 */
import { jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/transport-node";
import { Streams, type Session } from "@paddock/contracts";
import { api, sleep, Terminal, untilRecord, waitFor } from "./client.ts";
import { diffState, feedsDrained, snapshotState } from "./checks.ts";
import type { FuzzContext } from "./fuzz-context.ts";
import { fuzzHttp, HTTP_ROUTES } from "./fuzz-http.ts";
import { fuzzNats, readBackInjected } from "./fuzz-nats.ts";
import { fuzzWebSocket } from "./fuzz-ws.ts";
import { fuzzFilesWatch } from "./fuzz-files-watch.ts";
import { floodAndPaste } from "./fuzz-flood.ts";
import { startWebhookReceiver } from "./fuzz-webhook.ts";
import { sandboxCase } from "./fuzz-sandbox.ts";
import { execCase } from "./fuzz-exec.ts";
import { consoleCase } from "./fuzz-console.ts";
import { agentsCase } from "./fuzz-agents.ts";
import { previewCase } from "./fuzz-preview.ts";
import type { Prng } from "./prng.ts";
import { Anomalies, log, type ScenarioResult } from "./report.ts";
import type { ChaosStack } from "./stack.ts";

export const BAD_INPUT_ANOMALIES = [
  "services crashed",
  "5xx answers",
  "internal errors",
  "state changes",
  "malformed requests accepted",
  "requests never answered",
  "service stopped working",
  "input lost",
  "runner stalled by a paste",
  "sandbox escapes",
  "sandbox own work failed",
  "exec processes left running",
  "agent facts out of order",
  "waits left open",
  "webhook not delivered",
] as const;

const WS = "default";

async function created(stack: ChaosStack, body: unknown): Promise<Session> {
  const res = await api(stack.url, stack.token, "POST", "/v1/sessions", body);
  if (res.status !== 201) throw new Error(`fixture create answered ${res.status}: ${JSON.stringify(res.body)}`);
  return res.body as Session;
}

export async function badInputScenario(stack: ChaosStack, nc: NatsConnection, opts: { inputs: number; seed: number }, prng: Prng): Promise<ScenarioResult> {
  const started = Date.now();
  const crashBase = stack.crashes.length;
  const anomalies = new Anomalies(BAD_INPUT_ANOMALIES);

  // Fixtures: a webhook to a receiver here (registered first: the fixtures' events are delivered to it),
  // a live session whose app ignores every keystroke (raw terminal), one that ended with a log,
  // an environment, a token and a secret, so generated requests reach past "not found".
  const receiver = await startWebhookReceiver();
  const hook = await api(stack.url, stack.token, "POST", "/v1/webhooks", { url: receiver.url, events: ["session.*"] });
  if (hook.status !== 201) throw new Error(`fixture webhook answered ${hook.status}`);
  const webhook = hook.body as { id: string; secret: string };
  receiver.useSecret(webhook.secret);
  const running = await created(stack, { spec: { cmd: ["sh", "-c", "stty raw -echo; exec cat > /dev/null"] } });
  const dead = await created(stack, { spec: { cmd: ["sh", "-c", "echo fuzz-log; exit 0"] } });
  const runningRecord = await untilRecord(nc, WS, running.id, (s) => s.state === "running", 30_000);
  const deadRecord = await untilRecord(nc, WS, dead.id, (s) => s.state === "dead", 30_000);
  if (!runningRecord || !deadRecord) throw new Error("fixture sessions did not settle");
  const env = await api(stack.url, stack.token, "POST", "/v1/environments", { name: `fuzz-${opts.seed}` });
  const token = await api(stack.url, stack.token, "POST", "/v1/tokens", { label: "fuzz" });
  const secret = await api(stack.url, stack.token, "PUT", "/v1/secrets/FUZZ_SECRET", { value: "fuzz" });
  if (env.status !== 201 || token.status !== 201 || secret.status !== 204) throw new Error(`fixtures: environment ${env.status}, token ${token.status}, secret ${secret.status}`);
  const agent = await api(stack.url, stack.token, "POST", `/v1/sessions/${running.id}/agents`, { pid: 1, runtime: "fuzz-fixture" });
  if (agent.status !== 201) throw new Error(`fixture agent answered ${agent.status}`);
  const controller = await Terminal.open(stack.url, stack.token, running.id, `mode=controller&since=${"9".repeat(15)}`);
  await controller.until((t) => t.hello() !== undefined, 5_000);
  await sleep(300);

  const ctx: FuzzContext = {
    stack,
    nc,
    seed: opts.seed,
    fixtures: {
      running: runningRecord,
      dead: deadRecord,
      environmentId: (env.body as { id: string }).id,
      tokenId: (token.body as { id: string }).id,
      secretName: "FUZZ_SECRET",
      webhookId: webhook.id,
      agentIds: [(agent.body as { id: string }).id],
    },
    anomalies,
    sent: new Map(),
    statuses: new Map(),
    planted: [],
    auditSeqs: [],
  };
  await waitFor(() => feedsDrained(nc), 10_000, 200);
  const before = await snapshotState(nc);
  const invalidBefore = await invalidMessages(stack);

  let invalidAfter = invalidBefore;
  // Whatever happens (a harness error included), what was planted goes: later scenarios on this stack must see only real facts.
  try {
    const http = Math.round(opts.inputs * 0.5);
    const ws = Math.round(opts.inputs * 0.15);
    const bus = opts.inputs - http - ws;
    log("bad-input", `seed ${opts.seed}: ${http} HTTP, ${ws} WebSocket, ${bus} NATS inputs`);
    await fuzzHttp(ctx, http, prng.fork());
    await fuzzWebSocket(ctx, ws, prng.fork(), controller);
    await fuzzNats(ctx, bus, prng.fork());
    // Forked after the others, so the inputs of a seed from before this route are unchanged.
    await fuzzFilesWatch(ctx, Math.max(5, Math.round(ws / 4)), prng.fork());
    await readBackInjected(ctx);

    // Let consumers work through what was injected, then compare.
    await sleep(1_500);
    await waitFor(() => feedsDrained(nc), 10_000, 200);
    const after = await snapshotState(nc);
    const planted = new Set(ctx.planted.map((k) => `kv ${k.bucket} ${k.key}`));
    const changes = diffState(before, after).filter((line) => !planted.has(line.split(" ").slice(0, 3).join(" ")));
    for (const c of changes) anomalies.add("state changes", c);
    invalidAfter = await invalidMessages(stack);

    // After the state comparison: these create sessions of their own.
    await floodAndPaste(ctx, prng.fork());
    await execCase(ctx);
    await consoleCase(ctx);
    await agentsCase(ctx);
    await previewCase(ctx);
    await sandboxCase(ctx);

    for (const c of stack.crashes.slice(crashBase)) anomalies.add("services crashed", `${c.id} exited (${c.code ?? c.signal ?? "?"}) — repeat with --seed ${opts.seed} --only bad-input`);
    for (const id of stack.members.keys()) if (!stack.isUp(id)) await stack.startMember(id);
    // Still working: a fresh session runs to its end.
    const probe = await api(stack.url, stack.token, "POST", "/v1/sessions", { spec: { cmd: ["sh", "-c", "echo probe"] }, oneShot: true });
    const probed = probe.status === 201 ? await untilRecord(nc, WS, (probe.body as Session).id, (s) => s.state === "destroyed", 30_000) : undefined;
    if (!probed) anomalies.add("service stopped working", `after the inputs a one-shot session did not run to its end (create answered ${probe.status})`);
    // The fixture webhook was delivered the sessions' events all along, each one signed.
    if (receiver.received === 0) anomalies.add("webhook not delivered", "the fixture webhook received no delivery during the run");
    if (receiver.unverified > 0) anomalies.add("webhook not delivered", `${receiver.unverified} of ${receiver.received} deliveries failed Standard Webhooks verification`);
    if (controller.closeCode !== undefined) log("bad-input", `the fixture controller was closed (${controller.closeCode}) during the run`);
  } finally {
    // Clean up what the scenario planted, so later checks on this stack see only real facts.
    controller.close();
    const kvm = new Kvm(nc);
    for (const { bucket, key } of ctx.planted) await (await kvm.open(bucket)).purge(key);
    const jsm = await jetstreamManager(nc);
    for (const seq of ctx.auditSeqs) await jsm.streams.deleteMessage(Streams.audit, seq, false).catch(() => undefined);
    for (const id of [running.id, dead.id]) await api(stack.url, stack.token, "DELETE", `/v1/sessions/${id}`);
    await api(stack.url, stack.token, "DELETE", `/v1/environments/${ctx.fixtures.environmentId}`);
    await api(stack.url, stack.token, "DELETE", `/v1/tokens/${ctx.fixtures.tokenId}`);
    await api(stack.url, stack.token, "DELETE", "/v1/secrets/FUZZ_SECRET");
    await api(stack.url, stack.token, "DELETE", `/v1/webhooks/${webhook.id}`);
    await receiver.close();
  }

  const sent = [...ctx.sent.values()].reduce((a, b) => a + b, 0);
  const statuses = [...ctx.statuses.entries()].sort((a, b) => a[0] - b[0]);
  return {
    name: "bad-input",
    faults: sent,
    sessions: 8,
    anomalies: anomalies.counts,
    details: [`seed ${opts.seed} (repeat with --seed ${opts.seed} --only bad-input)`, ...anomalies.details],
    seconds: (Date.now() - started) / 1000,
    figures: [
      ...[...ctx.sent.entries()].map(([target, n]) => ({ metric: `inputs: ${target}`, value: n, unit: "" })),
      { metric: "HTTP routes fuzzed", value: HTTP_ROUTES.length + 1, unit: "", method: "every route of the HTTP contract (HttpApi and PublicApi), the terminal upgrade included" },
      { metric: "answers by status", value: statuses.reduce((a, [, n]) => a + n, 0), unit: "", method: statuses.map(([s, n]) => `${s}×${n}`).join(" ") },
      { metric: "invalid messages counted by services", value: invalidAfter - invalidBefore, unit: "", method: "paddock_invalid_messages_total delta over every service" },
      { metric: "state compared", value: before.size, unit: "keys/objects", method: "KV buckets (all but runner-leases) and object stores, revision + sha256; agent logs (AGENTS), facts per session" },
    ],
  };
}

async function invalidMessages(stack: ChaosStack): Promise<number> {
  let n = 0;
  for (const id of stack.members.keys()) n += (await stack.metric(id, "paddock_invalid_messages_total")) ?? 0;
  return n;
}
