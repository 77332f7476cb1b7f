/**
 * Runner → scheduler calls answered from the session record: placement checks
 * (terminal-log fence resolution) and the release of a booting session's
 * secret envelopes — only to the runner it is placed on, only names its
 * environment references, and (with per-principal credentials) only to that
 * runner's own inbox; and held checks, which name the placements a runner
 * still holds whose record ended without the teardown reaching it.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Kvm } from "@nats-io/kv";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { Api, Buckets, FleetRpc, inboxPrefixOf, runnerNatsUser, secretKey, Streams, type Session } from "@paddock/contracts";
import { tokenKey } from "@paddock/contracts/token-key";
import { callRpc, SecretBox } from "@paddock/bus";
import { HELD_CHECK_GRACE_MS } from "./runner-rpc.ts";
import { untilSession } from "@paddock/testing";
import { alice, dispatchInbox, factFor, publishFact, register, startHarness, waitForState, type SchedulerHarness } from "../testing/testkit.ts";

let h: SchedulerHarness;
let session: Session;
/** Connections that receive replies under a runner's own inbox prefix, as runner-agents do. */
const asRunner: Record<string, NatsConnection> = {};
let plain: NatsConnection;

beforeAll(async () => {
  h = await startHarness();
  // With NATS credentials configured, the scheduler answers secrets only to the holder's inbox.
  await h.start({ PADDOCK_NATS_USER: "scheduler" });
  const url = h.nc.getServer();
  for (const runnerId of ["r1", "r2"]) {
    const nc = await connect({ servers: `nats://${url}`, inboxPrefix: inboxPrefixOf(runnerNatsUser("default", runnerId)) });
    asRunner[runnerId] = nc;
    // Registration too is answered only to the runner's own inbox.
    await register(nc, { runnerId, generation: 1 });
  }
  plain = await connect({ servers: `nats://${url}` });
  const { environment } = await callRpc(h.nc, Api.createEnvironment, { scope: alice, body: { name: "with-secrets", secretRefs: ["API_KEY", "UNSET"] } });
  const box = new SecretBox(undefined);
  const secrets = await new Kvm(h.nc).open(Buckets.secrets);
  await secrets.put(secretKey("ws1", "API_KEY"), box.seal(secretKey("ws1", "API_KEY"), "value-1"));
  await secrets.put(secretKey("ws1", "NOT_REFERENCED"), box.seal(secretKey("ws1", "NOT_REFERENCED"), "value-2"));
  // Capacity 1 each: the first session goes to one of them; find which.
  const inboxes = { r1: await dispatchInbox(h.nc, "r1"), r2: await dispatchInbox(h.nc, "r2") };
  const { session: created } = await callRpc(h.nc, Api.createSession, { scope: alice, body: { spec: { cmd: ["true"] }, environmentId: environment.id } });
  const holder = (await waitPlaced(created.id)).runnerId ?? "";
  session = (await runningSessionFor(holder, inboxes[holder as "r1" | "r2"])) ?? created;
});
afterAll(async () => {
  for (const nc of [...Object.values(asRunner), plain]) await nc.close();
  await h.close();
});

function waitPlaced(id: string): Promise<Session> {
  return untilSession(h.nc, id, (s) => s.state === "creating");
}

async function runningSessionFor(runnerId: string, inbox: Awaited<ReturnType<typeof dispatchInbox>>): Promise<Session> {
  const start = await inbox.next();
  await publishFact(h.nc, factFor(runnerId, start, { type: "running" }));
  return waitForState(h.nc, start.sessionId, "running");
}

const placement = () => ({ poolId: session.poolId ?? "", runnerId: session.runnerId ?? "", workspaceId: "ws1", sessionId: session.id, placementGeneration: 1 });
const other = () => (session.runnerId === "r1" ? "r2" : "r1");

describe("placement check", () => {
  it("is current only for the runner and generation the record names", async () => {
    expect(await callRpc(h.nc, FleetRpc.placementCheck, placement())).toEqual({ current: true });
    expect(await callRpc(h.nc, FleetRpc.placementCheck, { ...placement(), placementGeneration: 2 })).toEqual({ current: false });
    expect(await callRpc(h.nc, FleetRpc.placementCheck, { ...placement(), runnerId: other() })).toEqual({ current: false });
    expect(await callRpc(h.nc, FleetRpc.placementCheck, { ...placement(), sessionId: "nope" })).toEqual({ current: false });
  });

  it("answers a malformed request invalid, for both calls", async () => {
    for (const [subject, body] of [
      [FleetRpc.placementCheck.subject, { ...placement(), placementGeneration: 0 }],
      [FleetRpc.placementCheck.subject, { ...placement(), extra: true }],
      [FleetRpc.sessionSecrets.subject, { ...placement(), names: ["not a name"] }],
      [FleetRpc.sessionSecrets.subject, { ...placement(), names: [], token: "yes" }],
      [FleetRpc.sessionSecrets.subject, "not json"],
    ] as const) {
      const reply = await h.nc.request(subject, typeof body === "string" ? body : JSON.stringify(body), { timeout: 5_000 });
      expect(reply.json()).toMatchObject({ ok: false, error: { code: "invalid" } });
    }
  });
});

describe("session secrets", () => {
  const ask = (conn: NatsConnection, names: string[], overrides: Record<string, unknown> = {}) =>
    callRpc(conn, FleetRpc.sessionSecrets, { ...placement(), names, ...overrides });

  it("releases the referenced envelopes to the holder's own inbox; an unset one comes without an envelope", async () => {
    const reply = await ask(asRunner[session.runnerId ?? ""] as NatsConnection, ["API_KEY", "UNSET"]);
    expect(reply.secrets.map((s) => s.name)).toEqual(["API_KEY", "UNSET"]);
    const envelope = reply.secrets[0]?.envelope ?? "";
    expect(new SecretBox(undefined).open(secretKey("ws1", "API_KEY"), Buffer.from(envelope, "base64"))).toBe("value-1");
    expect(reply.secrets[1]?.envelope).toBeUndefined();
  });

  it("refuses another runner's inbox, even when the request names the holder", async () => {
    await expect(ask(asRunner[other()] as NatsConnection, ["API_KEY"])).rejects.toMatchObject({ code: "forbidden" });
    await expect(ask(plain, ["API_KEY"])).rejects.toMatchObject({ code: "forbidden" });
  });

  it("refuses a runner the session is not placed on, and a stale generation", async () => {
    await expect(ask(asRunner[other()] as NatsConnection, ["API_KEY"], { runnerId: other() })).rejects.toMatchObject({ code: "not_found" });
    await expect(ask(asRunner[session.runnerId ?? ""] as NatsConnection, ["API_KEY"], { placementGeneration: 2 })).rejects.toMatchObject({ code: "not_found" });
  });

  it("refuses a name the session's environment does not reference", async () => {
    await expect(ask(asRunner[session.runnerId ?? ""] as NatsConnection, ["API_KEY", "NOT_REFERENCED"])).rejects.toMatchObject({ code: "forbidden" });
  });

  it("answers the placement's service token only to the holder; DISPATCH never carries it", async () => {
    const holder = asRunner[session.runnerId ?? ""] as NatsConnection;
    const { sessionToken } = await ask(holder, [], { token: true });
    expect(sessionToken).toMatch(/^pdk_ses_/);
    const record = await (await new Kvm(h.nc).open(Buckets.tokens)).get(tokenKey(sessionToken ?? ""));
    expect(record?.json()).toMatchObject({ workspaceId: "ws1", sessionId: session.id });
    // Not without asking, and never to anyone else.
    expect((await ask(holder, [])).sessionToken).toBeUndefined();
    await expect(ask(asRunner[other()] as NatsConnection, [], { token: true })).rejects.toMatchObject({ code: "forbidden" });
    await expect(ask(holder, [], { token: true, placementGeneration: 2 })).rejects.toMatchObject({ code: "not_found" });
    // Every command sent so far, as any reader of the stream sees it: no token in any.
    const jsm = await jetstreamManager(h.nc);
    const { state } = await jsm.streams.info(Streams.dispatch);
    expect(state.messages).toBeGreaterThan(0);
    for (let seq = state.first_seq; seq <= state.last_seq; seq++) {
      const m = await jsm.streams.getMessage(Streams.dispatch, { seq }).catch(() => undefined);
      if (m) expect(new TextDecoder().decode(m.data)).not.toContain(sessionToken);
    }
  });

  it("counts every refusal by reason", async () => {
    const values = (await (h.schedulers[0]?.context.metrics.secretsRefused.get() ?? Promise.resolve({ values: [] }))).values;
    const by = Object.fromEntries(values.map((v) => [String(v.labels.reason), v.value]));
    expect(by).toMatchObject({ inbox: 3, placement: 3, not_referenced: 1 });
  });
});

describe("held check", () => {
  const holder = () => session.runnerId ?? "";
  const held = (id: string, placementGeneration = 1) => ({ workspaceId: "ws1", sessionId: id, placementGeneration });
  const ask = (conn: NatsConnection, ids: Array<ReturnType<typeof held>>, overrides: Record<string, unknown> = {}) =>
    callRpc(conn, FleetRpc.heldCheck, { poolId: "default", runnerId: holder(), runnerGeneration: 1, sessions: ids, ...overrides });

  it("names the held placements whose record ended there or is gone, and no live, dead or moved one", async () => {
    const kv = await new Kvm(h.nc).open(Buckets.sessions);
    const longAgo = h.clock.ms - HELD_CHECK_GRACE_MS - 1;
    const put = (id: string, patch: Partial<Session>) => kv.put(`ws1.${id}`, JSON.stringify({ ...session, id, updatedAt: longAgo, ...patch }));
    await put("held_destroyed", { state: "destroyed" });
    await put("held_failed", { state: "failed" });
    await put("held_canceled", { state: "canceled" });
    await put("held_dead", { state: "dead" });
    await put("held_moved", { state: "destroyed", runnerId: other() });
    await put("held_newer", { state: "destroyed", placementGeneration: 2 });
    // Ended a moment ago: its teardown is still on its way.
    await put("held_just_ended", { state: "destroyed", updatedAt: h.clock.ms });
    const reply = await ask(asRunner[holder()] as NatsConnection, [
      held(session.id),
      held("held_destroyed"),
      held("held_failed"),
      held("held_canceled"),
      held("held_dead"),
      held("held_moved"),
      held("held_newer"),
      held("held_never_existed"),
      held("held_just_ended"),
    ]);
    expect(reply.ended.map((e) => e.sessionId).sort()).toEqual(["held_canceled", "held_destroyed", "held_failed", "held_never_existed"]);
  });

  it("refuses a superseded runner generation, another runner's inbox, and malformed requests", async () => {
    const conn = asRunner[holder()] as NatsConnection;
    await expect(ask(conn, [held(session.id)], { runnerGeneration: 2 })).rejects.toMatchObject({ code: "conflict" });
    await expect(ask(asRunner[other()] as NatsConnection, [held(session.id)])).rejects.toMatchObject({ code: "forbidden" });
    await expect(ask(plain, [held(session.id)])).rejects.toMatchObject({ code: "forbidden" });
    const valid = { poolId: "default", runnerId: holder(), runnerGeneration: 1, sessions: [held(session.id)] };
    for (const body of [
      { ...valid, runnerGeneration: 0 },
      { ...valid, extra: true },
      { ...valid, sessions: [{ ...held(session.id), extra: 1 }] },
      { ...valid, sessions: Array.from({ length: 501 }, (_, i) => held(`s${i}`)) },
      { ...valid, runnerId: "" },
      "not json",
    ]) {
      const reply = await conn.request(FleetRpc.heldCheck.subject, typeof body === "string" ? body : JSON.stringify(body), { timeout: 5_000 });
      expect(reply.json()).toMatchObject({ ok: false, error: { code: "invalid" } });
    }
  });
});
