/**
 * The session lifecycle through the real stack (four services as processes,
 * real PTYs, real object store): suspend/resume warm and cold (to another
 * runner), snapshot, environments with setup snapshots, one-shot, children
 * created with a session's own token, recycle, app restart.
 */
import { createHash } from "node:crypto";
import { gunzipSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Kvm } from "@nats-io/kv";
import { Objm } from "@nats-io/obj";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import type { AuditEvent, Session } from "@paddock/contracts";
import { startService, startStack, untilSession, type Stack } from "@paddock/testing";
import { runCli } from "../../cli/src/testing/run-cli.ts";
import { api, sessionOf, stackClient, waitForAuditEvents } from "./helpers.ts";

let stack: Stack;
let nc: NatsConnection;

beforeAll(async () => {
  stack = await startStack({ runnerCapacity: 16 });
  nc = await connect({ servers: stack.nats.url });
});
afterAll(async () => {
  await nc?.drain();
  await stack?.stop();
});

const { post, getSession, createSession, outputOf } = stackClient(() => stack);

/**
 * The session's checkpoint object is sealed: not a gzip stream anyone with
 * object store access can open, and its key is in the scheduler's key store
 * only — never on the record a client reads.
 */
async function expectSealed(session: Session): Promise<void> {
  const ref = session.checkpoint?.ref ?? "";
  const [store, ...name] = ref.split("/");
  const object = await (await new Objm(nc).open(store ?? "")).getBlob(name.join("/"));
  if (!object) throw new Error(`checkpoint object ${ref} missing`);
  expect([object[0], object[1]]).not.toEqual([0x1f, 0x8b]);
  expect(() => gunzipSync(object)).toThrow();
  const keyEntry = await (await new Kvm(nc).open("seal-keys")).get(createHash("sha256").update(ref).digest("hex"));
  const { key } = keyEntry?.json<{ key: string }>() ?? { key: "" };
  expect(key).toMatch(/^[A-Za-z0-9+/]{43}=$/);
  expect(JSON.stringify(await getSession(session.id))).not.toContain(key);
}


/** Resolves once the audit stream holds an event of the session matching pred. */
function untilEvent(sessionId: string, pred: (e: AuditEvent, all: AuditEvent[]) => boolean): Promise<AuditEvent[]> {
  return waitForAuditEvents(nc, "default", sessionId, (evs) => evs.some((e) => pred(e, evs)));
}

/** Resolves once the session's record reaches `state` (a KV watch: every revision, no polling). */
async function untilState(id: string, state: string): Promise<Session> {
  await untilSession(nc, id, (s) => s.state === state);
  return getSession(id);
}


describe("suspend and resume", () => {
  it("warm: the process stops in place and resume continues it", async () => {
    const s = await createSession({ spec: { cmd: ["sh", "-c", "i=0; while :; do echo tick$i; i=$((i+1)); sleep 0.1; done"] } });
    await outputOf(s.id, (t) => t.includes("tick2"));
    const suspended = await post(`/v1/sessions/${s.id}/suspend`, { warm: true });
    expect(suspended.status).toBe(200);
    expect(sessionOf(suspended).state).toBe("suspended_warm");
    const resumed = await post(`/v1/sessions/${s.id}/resume`, {});
    expect(sessionOf(resumed)).toMatchObject({ state: "running", placementGeneration: 1 });
    const before = (await api(stack.url, stack.token, "GET", `/v1/sessions/${s.id}/log`)).body as string;
    const lastTick = Number(/tick(\d+)\n?$/.exec(before.trim())?.[1] ?? 0);
    await outputOf(s.id, (t) => t.includes(`tick${lastTick + 2}`));
    await api(stack.url, stack.token, "DELETE", `/v1/sessions/${s.id}`);
  });

  it("cold: checkpoint, slot freed, resumed on another runner with its workspace restored", async () => {
    const script = "if [ -f state ]; then echo restored:$(cat state); else echo first > state; echo wrote; fi; exec sleep 600";
    const s = await createSession({ spec: { cmd: ["sh", "-c", script] } });
    await outputOf(s.id, (t) => t.includes("wrote"));
    const first = await getSession(s.id);
    const suspended = sessionOf(await post(`/v1/sessions/${s.id}/suspend`, { warm: false }));
    expect(suspended.state).toBe("suspended_cold");
    expect(suspended.checkpoint).toMatchObject({ format: "manifest+aes256gcm" });
    await expectSealed(suspended);
    // Load the first runner so placement (most free capacity first) picks the new one.
    const ballast = await createSession({ spec: { cmd: ["sleep", "600"] } });
    await untilState(ballast.id, "running");
    const runner2 = await stack.addRunner({ runnerId: "runner-cold-2" });
    const resumed = sessionOf(await post(`/v1/sessions/${s.id}/resume`, {}));
    expect(resumed).toMatchObject({ state: "running", placementGeneration: first.placementGeneration + 1 });
    expect(resumed.runnerId).toBe(String(runner2.ready.runnerId));
    await outputOf(s.id, (t) => t.includes("restored:first"));
  });
});

describe("waiting for a state, without polling", () => {
  it("a create with ?wait=running answers the session running; a long poll sees a cold suspend; lifecycle calls wait too; a wait for what cannot come answers at once", async () => {
    const created = await post("/v1/sessions?wait=running&timeoutMs=60000", { spec: { cmd: ["sh", "-c", "read line; echo got:$line"] } });
    expect(created.status).toBe(201);
    expect(created.body).toMatchObject({ state: "running", waited: { state: "running", outcome: "reached" } });
    const id = (created.body as Session).id;
    // The suspend's committed fact (an event on the session's audit subject) wakes the long poll.
    const suspending = api(stack.url, stack.token, "GET", `/v1/sessions/${id}?waitFor=suspended_cold&timeoutMs=60000`);
    expect((await post(`/v1/sessions/${id}/suspend`, { warm: false })).status).toBe(200);
    expect((await suspending).body).toMatchObject({ id, state: "suspended_cold", waited: { outcome: "reached" } });
    const resumed = await post(`/v1/sessions/${id}/resume?wait=running&timeoutMs=60000`, {});
    expect(resumed.body).toMatchObject({ state: "running", waited: { outcome: "reached" } });
    const gone = await api(stack.url, stack.token, "DELETE", `/v1/sessions/${id}?wait=destroyed&timeoutMs=60000`);
    expect(gone.body).toMatchObject({ state: "destroyed", waited: { outcome: "reached" } });
    const never = await api(stack.url, stack.token, "GET", `/v1/sessions/${id}?waitFor=running&timeoutMs=60000`);
    expect(never.body).toMatchObject({ state: "destroyed", waited: { state: "running", outcome: "unreachable" } });
  });

  it("paddock create --wait exits 0 once the session runs, and 1 when it fails instead", async () => {
    const cli = { PADDOCK_URL: stack.url, PADDOCK_TOKEN: stack.token };
    const ok = await runCli(["create", "--wait", "--timeout-ms", "60000", "--", "sleep", "600"], cli);
    expect(ok).toMatchObject({ code: 0, stderr: "" });
    expect((await getSession(ok.stdout.trim())).state).toBe("running");
    const env = await post("/v1/environments", { name: "broken-setup", setup: "exit 7" });
    const failed = await runCli(["create", "--wait", "--env", (env.body as { id: string }).id, "--", "true"], cli);
    expect(failed.code).toBe(1);
    expect(failed.stderr).toMatch(/^paddock create: session \S+ is failed: it will not run\n$/);
  });
});

describe("snapshot, one-shot, recycle, apps", () => {
  it("snapshot returns a checkpoint and the session keeps running", async () => {
    const s = await createSession({ spec: { cmd: ["sh", "-c", "echo data > f; echo ready; exec sleep 600"] } });
    await outputOf(s.id, (t) => t.includes("ready"));
    const snap = await post(`/v1/sessions/${s.id}/snapshot`);
    expect(snap.status).toBe(200);
    expect(snap.body).toMatchObject({ format: "manifest+aes256gcm", capabilities: ["portable"] });
    await expectSealed(await getSession(s.id));
    expect((await getSession(s.id)).state).toBe("running");
  });

  it("a one-shot session is released as soon as its command exits", async () => {
    const s = await createSession({ oneShot: true, spec: { cmd: ["sh", "-c", "exit 5"] } });
    await untilEvent(s.id, (e) => e.action === "exit");
    const done = await getSession(s.id);
    expect(done).toMatchObject({ state: "destroyed", childExitCode: 5 });
  });

  it("recycle answers a fresh session with the same spec and a new id, both records linked, and one recycle event", async () => {
    const s = await createSession({ spec: { cmd: ["sleep", "600"] } });
    const res = await post(`/v1/sessions/${s.id}/recycle`);
    expect(res.status).toBe(201);
    const { released, session } = res.body as { released: Session; session: Session };
    expect(released.id).toBe(s.id);
    expect(["canceled", "destroyed"]).toContain(released.state);
    expect(session.id).not.toBe(s.id);
    expect(session.spec).toEqual(s.spec);
    expect(released.successorId).toBe(session.id);
    expect(session.predecessorId).toBe(s.id);
    // Asked again: the same pair, nothing new.
    const again = await post(`/v1/sessions/${s.id}/recycle`);
    expect((again.body as { session: Session }).session.id).toBe(session.id);
    // Every committed fact of the released record has reached AUDIT; exactly one of them is the recycle.
    const facts: string[] = [];
    for await (const e of await (await new Kvm(nc).open("sessions")).history({ key: `default.${s.id}` })) {
      if (e.operation === "PUT") facts.push(e.json<Session>().lastFact.eventId);
    }
    const events = await waitForAuditEvents(nc, "default", s.id, (evs) => facts.every((id) => evs.some((e) => e.id === id)));
    const recycles = events.filter((e) => e.action === "recycle");
    expect(recycles).toHaveLength(1);
    expect(recycles[0]).toMatchObject({ resource: { kind: "session", id: s.id } });
    expect(events.map((e) => e.action)).not.toContain("delete");
    await untilEvent(session.id, (e) => e.action === "create");
    await api(stack.url, stack.token, "DELETE", `/v1/sessions/${session.id}`);
  });

  it("restarting one app opens its next generation; the session stays running", async () => {
    const s = await createSession({ spec: { apps: [{ name: "a", cmd: ["sh", "-c", "echo started; exec sleep 600"] }, { name: "b", cmd: ["sleep", "600"] }] } });
    await untilEvent(s.id, (e, all) => e.action === "run.started" && all.filter((x) => x.action === "run.started").length >= 2);
    const res = await post(`/v1/sessions/${s.id}/apps/a/restart`);
    expect(res.status).toBe(200);
    await untilEvent(s.id, (_e, all) => all.filter((x) => x.action === "run.started").length >= 3);
    const after = await getSession(s.id);
    expect(after.state).toBe("running");
    expect(after.apps?.a).toMatchObject({ generation: 2, trigger: "manual", phase: "running" });
    expect(after.apps?.b).toMatchObject({ generation: 1, trigger: "initial" });
    expect((await post(`/v1/sessions/${s.id}/apps/nope/restart`)).status).toBe(404);
  });
});

describe("children and environments", () => {
  it("a session creates a child with its own token; the roster lists it; ending the parent ends the child", async () => {
    const js =
      "fetch(process.env.PADDOCK_URL+'/v1/sessions',{method:'POST',headers:{authorization:'Bearer '+process.env.PADDOCK_TOKEN,'content-type':'application/json'}," +
      "body:JSON.stringify({spec:{cmd:['sleep','600']}})}).then(r=>r.json()).then(j=>console.log('child='+j.id+'.'))";
    const parent = await createSession({ spec: { cmd: ["sh", "-c", `node -e "${js}"; exec sleep 600`] } });
    const out = await outputOf(parent.id, (t) => /child=\S+\./.test(t));
    const childId = /child=(\S+)\./.exec(out)?.[1] ?? "";
    const roster = await api(stack.url, stack.token, "GET", `/v1/sessions?parentId=${parent.id}`);
    expect((roster.body as { sessions: Session[] }).sessions.map((c) => c.id)).toEqual([childId]);
    expect((await getSession(childId)).parentId).toBe(parent.id);
    await api(stack.url, stack.token, "DELETE", `/v1/sessions/${parent.id}`);
    await untilEvent(childId, (e) => e.action === "delete" || e.action === "cancel");
    expect(["canceled", "destroyed"]).toContain((await getSession(childId)).state);
    // The token never shows in the record, the log or the audit stream.
    const events = await waitForAuditEvents(nc, "default", parent.id, (evs) => evs.some((e) => e.action === "delete"));
    expect(JSON.stringify(events)).not.toContain("pdk_ses_");
    expect(JSON.stringify(await getSession(parent.id))).not.toContain("pdk_ses_");
  });

  it("a session's token lists, gets, recycles and deletes the sessions it created, and sees no other", async () => {
    const sibling = await createSession({ spec: { cmd: ["sleep", "600"] } });
    // No $ or backquote: the script sits inside sh -c "...".
    const js =
      "const u=process.env.PADDOCK_URL,h={authorization:'Bearer '+process.env.PADDOCK_TOKEN,'content-type':'application/json'};" +
      "const c=(m,p,b)=>fetch(u+p,{method:m,headers:h,body:b?JSON.stringify(b):undefined}).then(async r=>[r.status,await r.json()]);" +
      "(async()=>{const [,a]=await c('POST','/v1/sessions',{spec:{cmd:['sleep','600']}});" +
      "const [,b]=await c('POST','/v1/sessions',{spec:{cmd:['sleep','600']}});" +
      "const [ls,l]=await c('GET','/v1/sessions');" +
      "const [gs]=await c('GET','/v1/sessions/'+a.id);" +
      "const [rs,r]=await c('POST','/v1/sessions/'+a.id+'/recycle',{});" +
      "const [ds]=await c('DELETE','/v1/sessions/'+b.id);" +
      `const [os]=await c('GET','/v1/sessions/${sibling.id}');` +
      `const [od]=await c('DELETE','/v1/sessions/${sibling.id}');` +
      "console.log('roster='+JSON.stringify({a:a.id,b:b.id,listed:l.sessions.map(x=>x.id).sort(),ls,gs,rs,fresh:r.session.id,ds,os,od})+'.')})()";
    const parent = await createSession({ spec: { cmd: ["sh", "-c", `node -e "${js}"; exec sleep 600`] } });
    const out = await outputOf(parent.id, (t) => /roster=\{.*\}\./.test(t));
    const seen = JSON.parse(/roster=(\{.*\})\./.exec(out)?.[1] ?? "{}") as Record<string, unknown> & { a: string; b: string; fresh: string };
    expect(seen).toMatchObject({ listed: [seen.a, seen.b].sort(), ls: 200, gs: 200, rs: 201, ds: 200, os: 404, od: 404 });
    expect(await getSession(seen.a)).toMatchObject({ successorId: seen.fresh, state: expect.stringMatching(/^(canceled|destroyed)$/) });
    expect(await getSession(seen.fresh)).toMatchObject({ predecessorId: seen.a, parentId: parent.id, creatorId: parent.id });
    expect(["canceled", "destroyed"]).toContain((await getSession(seen.b)).state);
    expect(["canceled", "destroyed"]).not.toContain((await getSession(sibling.id)).state);
    // Members filter the roster by creator and parent.
    const byCreator = await api(stack.url, stack.token, "GET", `/v1/sessions?creatorId=${parent.id}&includeTerminal=true`);
    expect((byCreator.body as { sessions: Session[] }).sessions.map((x) => x.id).sort()).toEqual([seen.a, seen.b, seen.fresh].sort());
    const bad = await api(stack.url, stack.token, "GET", "/v1/sessions?creatorId=..%2Fx");
    expect(bad).toMatchObject({ status: 400, body: { error: { code: "invalid" } } });
    await api(stack.url, stack.token, "DELETE", `/v1/sessions/${parent.id}`);
    await api(stack.url, stack.token, "DELETE", `/v1/sessions/${sibling.id}`);
  });

  it("an environment's setup runs once; later sessions boot from its snapshot; init runs every boot", async () => {
    // Each setup run writes a marker of its own: sessions showing one marker booted from one run's snapshot.
    const env = await post("/v1/environments", {
      name: "built",
      setup: "echo built-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ') > built.txt",
      init: "echo booted >> boots.txt",
      egressAllow: ["registry.npmjs.org"],
    });
    expect(env.status).toBe(201);
    const envId = (env.body as { id: string }).id;
    const cmd = ["sh", "-c", "echo content:$(cat built.txt) boots:$(wc -l < boots.txt); exec sleep 600"];
    const a = await createSession({ environmentId: envId, spec: { cmd, egressAllow: ["example.com", "registry.npmjs.org"] } });
    expect(a.spec.egressAllow).toEqual(["registry.npmjs.org", "example.com"]);
    const marker = /content:(built-[0-9a-f]{16}) boots:1/.exec(await outputOf(a.id, (t) => /content:built-[0-9a-f]{16} boots:1/.test(t)))?.[1];
    await untilEventOnEnv(envId);
    const b = await createSession({ environmentId: envId, spec: { cmd } });
    await outputOf(b.id, (t) => t.includes(`content:${marker} boots:1`));
    // Delete is refused while sessions use it.
    expect((await api(stack.url, stack.token, "DELETE", `/v1/environments/${envId}`)).status).toBe(409);
  });
});

describe("setup once per setupHash", () => {
  it("sessions created together from a fresh environment run its setup once", async () => {
    // Each setup run writes a marker of its own: one marker in every session is one run.
    const env = await post("/v1/environments", { name: "together", setup: "echo built-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ') > built.txt" });
    const envId = (env.body as { id: string }).id;
    const cmd = ["sh", "-c", "echo content:$(cat built.txt); exec sleep 600"];
    const sessions = await Promise.all([1, 2, 3].map(() => createSession({ environmentId: envId, spec: { cmd } })));
    const markers = new Set<string>();
    for (const s of sessions) markers.add(/content:(built-[0-9a-f]{16})/.exec(await outputOf(s.id, (t) => /content:built-[0-9a-f]{16}/.test(t)))?.[1] ?? "none");
    expect([...markers]).toHaveLength(1);
    expect([...markers][0]).toMatch(/^built-/);
    for (const s of sessions) await api(stack.url, stack.token, "DELETE", `/v1/sessions/${s.id}`);
  });
});

/** Resolves once the environment record carries a snapshot (its audit feed is the env's KV revisions). */
async function untilEventOnEnv(envId: string): Promise<void> {
  for (;;) {
    const env = (await api(stack.url, stack.token, "GET", `/v1/environments/${envId}`)).body as { snapshot?: unknown; snapshotHash?: string; setupHash: string };
    if (env.snapshot && env.snapshotHash === env.setupHash) return;
    const kv = await new Kvm(nc).open("environments");
    const w = await kv.watch({ key: `default.${envId}` });
    for await (const e of w) {
      if (e.operation === "PUT" && e.json<{ snapshot?: unknown }>().snapshot) break;
    }
    w.stop();
  }
}

describe("races across two scheduler processes", () => {
  it("concurrent duplicate creates with one idempotency key yield one session; suspend racing delete ends destroyed", async () => {
    const second = await startService("scheduler", { ...stack.commonEnv, PADDOCK_SESSION_TOKEN_SECRET: "unused-in-this-test-0123" });
    try {
      const body = { idempotencyKey: "race-1", spec: { cmd: ["sleep", "600"] } };
      const answers = await Promise.all(Array.from({ length: 8 }, () => post("/v1/sessions", body)));
      const ids = new Set(answers.map((a) => sessionOf(a).id));
      expect(ids.size).toBe(1);
      expect(answers.filter((a) => a.status === 201)).toHaveLength(1);
      expect(answers.filter((a) => a.status === 200)).toHaveLength(7);
      const id = [...ids][0] ?? "";
      await untilState(id, "running");
      const [suspend, del] = await Promise.all([post(`/v1/sessions/${id}/suspend`, { warm: false }), api(stack.url, stack.token, "DELETE", `/v1/sessions/${id}`)]);
      expect(del.status).toBe(200);
      expect([200, 409]).toContain(suspend.status);
      expect((await untilState(id, "destroyed")).state).toBe("destroyed");
    } finally {
      await second.stop();
    }
  });
});
