/**
 * Malformed messages on every NATS subject the services consume: the
 * scheduler's request/reply operations, registration, runner facts,
 * dispatch commands, controller input, presence, terminal chunks, audit
 * events and the KV change feeds. Subjects come from the contracts'
 * builders. Every payload is checked against its schema and only sent when
 * the schema refuses it. An `internal` error reply is the bus's 5xx.
 */
import { createHash } from "node:crypto";
import { jetstream } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { headers as natsHeaders, type MsgHdrs } from "@nats-io/transport-node";
import type { z } from "zod";
import {
  Api,
  Buckets,
  DispatchCommand,
  FleetRpc,
  Headers,
  Presence,
  RegisterRunnerRequest,
  ResizeInput,
  RunnerActivity,
  RunnerFact,
  Subjects,
  workspaceRpcs,
  execRpcs,
  execCreditSubject,
  ExecCredit,
  packWithBytes,
  unpackWithBytes,
  type Rpc,
} from "@paddock/contracts";
import { api, Terminal, UpgradeRefused } from "./client.ts";
import { countStatus, excerpt, nextInput, type FuzzContext } from "./fuzz-context.ts";
import { brokenJsonText, nastyString, randomJson, refusedBy } from "./fuzz-values.ts";
import type { Prng } from "./prng.ts";

const enc = new TextEncoder();

/** A payload the schema refuses: raw bytes, broken JSON, or JSON mutated from a plausible sample. */
function payload(p: Prng, schema: z.ZodType, sample: unknown): Uint8Array {
  const k = p.int(0, 9);
  if (k < 2) return p.bytes(p.int(0, 300));
  if (k < 4) return Buffer.from(brokenJsonText(p, sample), "latin1");
  return enc.encode(JSON.stringify(refusedBy(p, schema, sample)) ?? "null");
}

function fuzzHeaders(entries: Array<[string, string]>): MsgHdrs {
  const h = natsHeaders();
  for (const [k, v] of entries) h.set(k, v);
  return h;
}

/** A header value NATS can carry (no CR/LF) that is not a plain decimal. */
function badNumber(p: Prng): string {
  return p.pick(["", "abc", "-1", "1.5", "1e9", "9".repeat(16), " 1", "0x1", nastyString(p).replace(/[\r\n]/g, "")]);
}

export async function fuzzNats(ctx: FuzzContext, count: number, p: Prng, only?: string): Promise<void> {
  const { nc, fixtures } = ctx;
  const js = jetstream(nc);
  const kvm = new Kvm(nc);
  const running = fixtures.running;
  const pool = running.poolId ?? "default";
  const runner = running.runnerId ?? "runner-1";
  const scope = { workspaceId: running.workspaceId, actor: { id: "dev", kind: "user" } };
  const rpcs: Array<Rpc<z.ZodType, z.ZodType>> = [
    ...Object.values(Api),
    ...Object.values(FleetRpc),
    ...ctx.stack.runnerIds.flatMap((r) => Object.values(workspaceRpcs(pool, r))),
    ...ctx.stack.runnerIds.flatMap((r) => Object.values(execRpcs(pool, r))),
  ];
  const rpcSample = {
    scope,
    sessionId: running.id,
    environmentId: fixtures.environmentId,
    runnerId: runner,
    poolId: pool,
    workspaceId: running.workspaceId,
    placementGeneration: running.placementGeneration,
    limit: 10,
    body: { spec: { cmd: ["true"] } },
  };
  const factSample = {
    type: "exited",
    runnerId: runner,
    poolId: pool,
    runnerGeneration: 1,
    sessionId: running.id,
    workspaceId: running.workspaceId,
    placementGeneration: running.placementGeneration,
    at: Date.now(),
    exitCode: 0,
  };
  // A checkpoint naming its base (incremental checkpoints): mutated into bases of the wrong shape or too many.
  const checkpointSample = { type: "checkpoint", sessionId: running.id, workspaceId: running.workspaceId, runnerGeneration: 1, placementGeneration: running.placementGeneration, requestId: "req_fuzz", base: ["checkpoints/x"] };
  const commandSample = { type: "destroy", sessionId: running.id, workspaceId: running.workspaceId, runnerGeneration: 1, placementGeneration: running.placementGeneration };

  const all: Array<[number, string, (n: number) => Promise<void>]> = [
    [
      30,
      "nats request/reply",
      async (n) => {
        const rpc = p.pick(rpcs);
        const json = payload(p, rpc.request, rpcSample);
        // A withBytes rpc's messages are its JSON packed with bytes (some bytes, or a frame that is not one at all).
        const data = rpc.withBytes ? (p.bool(0.8) ? packWithBytes(json, p.bytes(p.int(0, 64))) : p.bytes(p.int(0, 3))) : json;
        const what = `input #${n} ${rpc.subject} ${excerpt(Buffer.from(data), 100)}`;
        let text: string;
        try {
          const answer = (await nc.request(rpc.subject, data, { timeout: 5_000 })).data;
          const unpacked = rpc.withBytes ? unpackWithBytes(answer) : { json: answer };
          if (!unpacked) {
            ctx.anomalies.add("malformed replies", `${what}: not packed`);
            return;
          }
          text = new TextDecoder().decode(unpacked.json);
        } catch (err) {
          ctx.anomalies.add("requests never answered", `${what}: ${err instanceof Error ? err.message : String(err)}`);
          return;
        }
        const reply = (() => {
          try {
            return JSON.parse(text) as { ok?: boolean; error?: { code?: string } };
          } catch {
            return undefined;
          }
        })();
        if (reply?.ok === true) ctx.anomalies.add("malformed requests accepted", what);
        else if (reply?.error?.code === "internal") ctx.anomalies.add("internal errors", `${what} → ${excerpt(text)}`);
      },
    ],
    [5, "nats register", async () => nc.publish(Subjects.register(pool, runner), payload(p, RegisterRunnerRequest, { runnerId: runner, poolId: pool, generation: 1, capacityTotal: 1, capabilities: [], sessions: [] }))],
    [15, "nats runner facts", async () => void (await js.publish(Subjects.runnerEvents(pool, p.pick(ctx.stack.runnerIds)), payload(p, RunnerFact, factSample)))],
    [12, "nats dispatch", async () => void (await js.publish(Subjects.dispatch(pool, p.pick(ctx.stack.runnerIds)), payload(p, DispatchCommand, p.pick([commandSample, checkpointSample]))))],
    [
      12,
      "nats input",
      async () => {
        // Malformed by construction: a kind the runner does not know, a missing or non-decimal
        // controller generation, a resize whose body breaks ResizeInput, or a credit request
        // without a reply subject or with a body.
        const mode = p.int(0, 3);
        const entries: Array<[string, string]> = [];
        let data: Uint8Array = p.bytes(p.int(0, 64));
        if (mode === 0) {
          entries.push([Headers.inputKind, p.pick(["", "DATA", "claims", "x", nastyString(p).replace(/[\r\n]/g, "")])]);
          if (p.bool()) entries.push([Headers.controllerGeneration, String(p.int(0, 3))]);
        } else if (mode === 1) {
          entries.push([Headers.inputKind, p.pick(["data", "resize", "claim", "credit"])]);
          if (p.bool(0.8)) entries.push([Headers.controllerGeneration, badNumber(p)]);
        } else if (mode === 2) {
          entries.push([Headers.inputKind, "resize"], [Headers.controllerGeneration, String(p.int(0, 3))]);
          data = payload(p, ResizeInput, { cols: 80, rows: 24 });
        } else {
          entries.push([Headers.inputKind, "credit"], [Headers.controllerGeneration, String(p.int(0, 3))]);
          data = p.bytes(p.int(0, 64));
        }
        const h = fuzzHeaders(entries);
        nc.publish(Subjects.input(pool, runner, running.id, p.pick(["main", "nope"])), data, { headers: h });
      },
    ],
    [
      4,
      "nats exec credit",
      async () => {
        // A credit for a process nobody runs, or one that breaks ExecCredit: changes nothing, and a request is answered {known:false}.
        const data = payload(p, ExecCredit, { sessionId: running.id, execId: `x${p.string(8)}`, bytes: p.int(0, 1 << 30) });
        const subject = execCreditSubject(pool, p.pick(ctx.stack.runnerIds));
        if (p.bool(0.7)) nc.publish(subject, data);
        else await nc.request(subject, data, { timeout: 5_000 }).catch((err: unknown) => ctx.anomalies.add("requests never answered", `exec credit: ${String(err)}`));
      },
    ],
    [5, "nats presence", async () => nc.publish(Subjects.presence(running.id), payload(p, Presence, { sessionId: running.id, workspaceId: running.workspaceId, clients: 1 }))],
    [
      3,
      "nats activity",
      async () => {
        // Malformed, or well formed but speaking for another runner than its subject names: refused either way.
        const sample = { poolId: pool, runnerId: runner, sessions: [running.id] };
        const data = p.bool(0.8) ? payload(p, RunnerActivity, sample) : enc.encode(JSON.stringify({ ...sample, runnerId: `${runner}x` }));
        nc.publish(Subjects.activity(pool, runner), data);
      },
    ],
    [
      2,
      "nats audit (attached session)",
      async () => {
        // The gateway re-reads an attached session's record on any message on its audit subject. AUDIT stores it too:
        // published with an ack so the scenario can remove it afterwards.
        const ack = await js.publish(Subjects.audit(running.workspaceId, "session", running.id), p.bytes(p.int(0, 100)));
        ctx.auditSeqs.push(ack.seq);
      },
    ],
    [
      5,
      "nats terminal chunks",
      async () => {
        const dead = fixtures.dead;
        const h = fuzzHeaders([
          ...(p.bool(0.7) ? ([[Headers.placementGeneration, p.bool(0.5) ? badNumber(p) : String(dead.placementGeneration)]] as Array<[string, string]>) : []),
          ...(p.bool(0.4) ? ([[Headers.exitCode, badNumber(p)]] as Array<[string, string]>) : []),
          ...(p.bool(0.2) ? ([[Headers.stream, p.pick(["stdout", "stderr", "x", ""])]] as Array<[string, string]>) : []),
          ...(p.bool(0.2) ? ([[Headers.terminalSize, p.pick(["100x30", "0x0", "1001x5", "80x", "x24", "99999x99999", badNumber(p)])]] as Array<[string, string]>) : []),
        ]);
        await js.publish(Subjects.term(dead.poolId ?? pool, dead.runnerId ?? runner, dead.id, "main"), p.bytes(p.int(0, 2000)), { headers: h });
      },
    ],
    [
      4,
      "nats audit events",
      async () => {
        const data = p.bool(0.5) ? p.bytes(p.int(0, 200)) : enc.encode(JSON.stringify(randomJson(p)) ?? "null");
        const ack = await js.publish(Subjects.audit(running.workspaceId, "session", `ses_fuzz${p.string(8)}`), data);
        ctx.auditSeqs.push(ack.seq);
      },
    ],
    [
      10,
      "kv change feeds",
      async (n) => {
        const bucket = p.pick([Buckets.sessions, Buckets.runners, Buckets.runnerLeases, Buckets.environments, Buckets.tokens, Buckets.members, Buckets.names]);
        const fuzzToken = `pdk_fuzz${p.string(30)}`;
        const key =
          bucket === Buckets.tokens
            ? createHash("sha256").update(fuzzToken).digest("hex")
            : bucket === Buckets.runners || bucket === Buckets.runnerLeases
              ? `fuzzpool.r${p.string(6)}`
              : bucket === Buckets.names
                ? `fuzzws.dev.${p.string(6)}`
                : `fuzzws.fz_${p.string(10)}`;
        const value = p.bool(0.4) ? p.bytes(p.int(0, 200)) : enc.encode(JSON.stringify(randomJson(p)) ?? "null");
        await (await kvm.open(bucket)).put(key, value);
        ctx.planted.push({ bucket, key });
        if (bucket === Buckets.tokens) {
          // The gateway reads this record when the token is presented: it must refuse it, not fail.
          const res = await api(ctx.stack.url, fuzzToken, "GET", "/v1/sessions");
          countStatus(ctx, res.status);
          if (res.status >= 500) ctx.anomalies.add("5xx answers", `input #${n} malformed token record → GET /v1/sessions ${res.status}`);
          if (res.status < 400) ctx.anomalies.add("malformed requests accepted", `input #${n} malformed token record authenticated`);
        }
      },
    ],
  ];
  const families = all.filter(([, name]) => only === undefined || name === only);
  const total = families.reduce((a, [w]) => a + w, 0);
  for (let i = 0; i < count; i++) {
    let r = p.int(0, total - 1);
    const family = families.find(([w]) => (r -= w) < 0) ?? families[0];
    if (!family) break;
    const n = nextInput(ctx, family[1]);
    try {
      await family[2](n);
    } catch (err) {
      ctx.anomalies.add("requests never answered", `input #${n} ${family[1]}: ${err instanceof Error ? err.message : String(err)}`);
    }
  }
  await nc.flush();
}

/** After the injections: make the gateway read the injected terminal chunks and audit events (replay, screen, events API). */
export async function readBackInjected(ctx: FuzzContext): Promise<void> {
  const { dead } = ctx.fixtures;
  const paths = [`/v1/sessions/${dead.id}/log`, `/v1/events?limit=500`, `/v1/events?sessionId=${ctx.fixtures.running.id}`, `/v1/sessions/${dead.id}/log?since=1`];
  for (const path of paths) {
    const res = await api(ctx.stack.url, ctx.stack.token, "GET", path);
    countStatus(ctx, res.status);
    if (res.status >= 500) ctx.anomalies.add("5xx answers", `read-back GET ${path} → ${res.status} ${excerpt(res.body)}`);
  }
  for (const since of ["all", "screen", "1"]) {
    const t = await Terminal.open(ctx.stack.url, ctx.stack.token, dead.id, `since=${since}`).catch((err: unknown) => err);
    if (!(t instanceof Terminal)) {
      if (t instanceof UpgradeRefused && t.status >= 500) ctx.anomalies.add("5xx answers", `read-back terminal since=${since} → ${t.status}`);
      continue;
    }
    await t.until((x) => x.closeCode !== undefined, 3_000);
    if (t.closeCode === 1011 || t.texts.some((f) => f.frame.code === "internal")) ctx.anomalies.add("internal errors", `read-back terminal since=${since}: close ${t.closeCode ?? "open"}`);
    t.close();
  }
}
