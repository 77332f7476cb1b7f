/**
 * NATS isolation (issue 7, item 4) against a real nats-server running the
 * generated `natsAuthConfig`: every denial a runner (and a control-plane
 * service) must hit, shown explicitly as a permissions violation, every
 * allowed path working, and the whole stack running one session end to end
 * with per-service credentials and no violation in the server log.
 */
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AckPolicy, DeliverPolicy, jetstream, jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { connect, headers, type NatsConnection } from "@nats-io/transport-node";
import { callRpc, provision, readLatestFromLeader } from "@paddock/bus";
import { Objm } from "@nats-io/obj";
import { FleetRpc, Headers, inboxPrefixOf, ObjectStores, runnerChunkStream, runnerObjectStore, Subjects } from "@paddock/contracts";
import { connectAs, ControlPlaneUsers, natsAuthConfig, runnerUser, startNatsServer, startStack, type NatsServerHandle, type Stack } from "@paddock/testing";
import { api, sessionOf, Terminal, waitForAuditEvents } from "./helpers.ts";
import { denied } from "./nats-denied.ts";

const R1 = { poolId: "default", runnerId: "r1" };
const R2 = { poolId: "default", runnerId: "r2" };
const users = [...Object.values(ControlPlaneUsers), runnerUser(R1.poolId, R1.runnerId), runnerUser(R2.poolId, R2.runnerId)];
const passwords = Object.fromEntries(users.map((u) => [u, randomBytes(12).toString("hex")]));

describe("NATS permissions per principal", () => {
  let server: NatsServerHandle;
  const conns: Record<string, NatsConnection> = {};
  const as = (user: string) => {
    const nc = conns[user];
    if (!nc) throw new Error(`not connected as ${user}`);
    return nc;
  };
  const r1 = () => as(runnerUser(R1.poolId, R1.runnerId));
  const admin = () => as(ControlPlaneUsers.provisioner);

  beforeAll(async () => {
    server = await startNatsServer({ extraConfig: natsAuthConfig({ runners: [R1, R2], passwords }) });
    for (const u of users) conns[u] = await connectAs(server.url, u, passwords[u] ?? "", { name: u });
    await provision(admin(), { replicas: 1 });
    // Each runner creates its own durable, filtered to its own subject (what registration.ts does).
    for (const r of [R1, R2]) {
      await (await jetstreamManager(as(runnerUser(r.poolId, r.runnerId)))).consumers.add("DISPATCH", {
        durable_name: runnerUser(r.poolId, r.runnerId),
        filter_subject: `paddock.dispatch.${r.poolId}.${r.runnerId}`,
        ack_policy: AckPolicy.Explicit,
        deliver_policy: DeliverPolicy.New,
      });
    }
  });
  afterAll(async () => {
    for (const nc of Object.values(conns)) await nc.close();
    await server?.stop();
  });

  it("refuses a connection without credentials, with a wrong password, or as a runner that is not declared", async () => {
    await expect(connect({ servers: server.url })).rejects.toThrow(/authorization/i);
    await expect(connect({ servers: server.url, user: runnerUser("default", "r3"), pass: passwords[runnerUser(R1.poolId, R1.runnerId)] ?? "" })).rejects.toThrow(/authorization/i);
    await expect(connect({ servers: server.url, user: "scheduler", pass: "wrong" })).rejects.toThrow(/authorization/i);
  });

  describe("a runner", () => {
    it("cannot write another runner's lease", async () => {
      const subject = "$KV.runner-leases.default.r2";
      const err = await denied(r1(), subject, () => jetstream(r1()).publish(subject, "{}", { timeout: 5_000 }));
      expect(err).toMatch(/permissions violation/i);
      const leases = await new Kvm(admin()).open("runner-leases");
      expect(await leases.get("default.r2")).toBeNull();
    });

    it("cannot write a session record", async () => {
      const kv = await new Kvm(r1()).open("sessions"); // open = STREAM.INFO, granted to every provisioner
      const err = await denied(r1(), "$KV.sessions.default.s1", () => kv.put("default.s1", "{}", { timeout: 5_000 }));
      expect(err).toMatch(/permissions violation/i);
      expect(await (await new Kvm(admin()).open("sessions")).get("default.s1")).toBeNull();
    });

    it("cannot read or watch the sessions, tokens, members, secrets or seal-key buckets, nor read another runner's record", async () => {
      for (const bucket of ["sessions", "tokens", "members", "secrets", "seal-keys"]) {
        const kv = await new Kvm(r1()).open(bucket);
        expect(await denied(r1(), `$JS.API.STREAM.MSG.GET.KV_${bucket}`, () => kv.get("default.s1"))).toMatch(/permissions violation/i);
        expect(await denied(r1(), `$JS.API.CONSUMER.CREATE.KV_${bucket}`, () => kv.watch())).toMatch(/permissions violation/i);
      }
      const direct = await new Kvm(r1()).open("runners", { allow_direct: true });
      expect(await denied(r1(), "$JS.API.DIRECT.GET.KV_runners.$KV.runners.default.r2", () => direct.get("default.r2"))).toMatch(/permissions violation/i);
      const runners = await new Kvm(r1()).open("runners");
      expect(await denied(r1(), "$JS.API.CONSUMER.CREATE.KV_runners", () => runners.watch())).toMatch(/permissions violation/i);
      // The get without a key in the subject (STREAM.MSG.GET) is not granted either: any record would be readable through it.
      expect(await denied(r1(), "$JS.API.STREAM.MSG.GET.KV_runners", () => runners.get("default.r2"))).toMatch(/permissions violation/i);
      const secrets = await new Kvm(r1()).open("secrets", { allow_direct: true });
      expect(await denied(r1(), "$JS.API.DIRECT.GET.KV_secrets.$KV.secrets.default.TOKEN", () => secrets.get("default.TOKEN"))).toMatch(/permissions violation/i);
      // Checkpoint objects are shared between runners (any may resume a session); their keys are not.
      const sealKeys = await new Kvm(r1()).open("seal-keys", { allow_direct: true });
      expect(await denied(r1(), "$JS.API.DIRECT.GET.KV_seal-keys.$KV.seal-keys.k", () => sealKeys.get("k"))).toMatch(/permissions violation/i);
      expect(await denied(r1(), "$KV.seal-keys.k", () => jetstream(r1()).publish("$KV.seal-keys.k", "forged", { timeout: 5_000 }))).toMatch(/permissions violation/i);
    });

    it("cannot write another runner's terminal logs, nor read any log but its own", async () => {
      const foreign = Subjects.term(R2.poolId, R2.runnerId, "s1", "main");
      expect(await denied(r1(), foreign, () => jetstream(r1()).publish(foreign, "forged", { timeout: 5_000 }))).toMatch(/permissions violation/i);
      expect(await denied(r1(), foreign, () => r1().publish(foreign, "forged"))).toMatch(/permissions violation/i);
      // A subject without runner tokens (the old layout) is nobody's.
      expect(await denied(r1(), "paddock.term.s1.main", () => r1().publish("paddock.term.s1.main", "forged"))).toMatch(/permissions violation/i);
      const jsm = await jetstreamManager(r1());
      expect(await denied(r1(), `$JS.API.DIRECT.GET.TERM.${foreign}`, () => jsm.direct.getMessage("TERM", { last_by_subj: foreign }))).toMatch(/permissions violation/i);
      const wildcard = Subjects.termOfApp("s1", "main");
      expect(await denied(r1(), `$JS.API.DIRECT.GET.TERM.${wildcard}`, () => jsm.direct.getMessage("TERM", { last_by_subj: wildcard }))).toMatch(
        /permissions violation/i,
      );
      expect(await denied(r1(), "$JS.API.STREAM.MSG.GET.TERM", () => jsm.streams.getMessage("TERM", { seq: 1 }))).toMatch(/permissions violation/i);
      expect(await denied(r1(), "$JS.API.CONSUMER.CREATE.TERM", () => jsm.consumers.add("TERM", { filter_subject: wildcard }))).toMatch(/permissions violation/i);
      expect((await (await jetstreamManager(admin())).streams.info("TERM", { subjects_filter: ">" })).state.subjects?.[foreign]).toBeUndefined();
    });

    it("cannot write, read or watch any session's agent log (only gateways do)", async () => {
      const subject = Subjects.agents("default", "s1");
      expect(await denied(r1(), subject, () => jetstream(r1()).publish(subject, "{}", { timeout: 5_000 }))).toMatch(/permissions violation/i);
      expect(await denied(r1(), subject, () => r1().publish(subject, "{}"))).toMatch(/permissions violation/i);
      const jsm = await jetstreamManager(r1());
      expect(await denied(r1(), `$JS.API.DIRECT.GET.AGENTS.${subject}`, () => jsm.direct.getMessage("AGENTS", { last_by_subj: subject }))).toMatch(/permissions violation/i);
      expect(await denied(r1(), "$JS.API.CONSUMER.CREATE.AGENTS", () => jsm.consumers.add("AGENTS", { filter_subject: subject }))).toMatch(/permissions violation/i);
      expect(await denied(r1(), subject, () => r1().subscribe(subject).closed)).toMatch(/permissions violation/i);
      expect((await (await jetstreamManager(admin())).streams.info("AGENTS", { subjects_filter: ">" })).state.subjects?.[subject]).toBeUndefined();
    });

    it("cannot write another runner's screen checkpoints, nor read any checkpoint", async () => {
      const foreign = Subjects.screen(R2.poolId, R2.runnerId, "s1", "main");
      expect(await denied(r1(), foreign, () => jetstream(r1()).publish(foreign, "{}", { timeout: 5_000 }))).toMatch(/permissions violation/i);
      expect(await denied(r1(), "paddock.screen.s1.main", () => r1().publish("paddock.screen.s1.main", "{}"))).toMatch(/permissions violation/i);
      const jsm = await jetstreamManager(r1());
      const own = Subjects.screen(R1.poolId, R1.runnerId, "s1", "main");
      expect(await denied(r1(), `$JS.API.DIRECT.GET.SCREENS.${own}`, () => jsm.direct.getMessage("SCREENS", { last_by_subj: own }))).toMatch(/permissions violation/i);
      expect(await denied(r1(), "$JS.API.STREAM.PURGE.SCREENS", () => jsm.streams.purge("SCREENS"))).toMatch(/permissions violation/i);
    });

    it("cannot listen to another runner's input, all input, or anyone else's replies", async () => {
      for (const subject of [Subjects.inputOfRunner(R2.poolId, R2.runnerId), Subjects.inputAll, "paddock.input.*.*.s1.main", Subjects.claimAll, "_INBOX.>", `${inboxPrefixOf(runnerUser(R2.poolId, R2.runnerId))}.>`, `${inboxPrefixOf(ControlPlaneUsers.gateway)}.>`]) {
        expect(await denied(r1(), subject, () => r1().subscribe(subject))).toMatch(/permissions violation/i);
      }
    });

    it("reports activity only under its own subject, which the scheduler hears", async () => {
      const foreign = Subjects.activity(R2.poolId, R2.runnerId);
      expect(await denied(r1(), foreign, () => r1().publish(foreign, "{}"))).toMatch(/permissions violation/i);
      const heard = as(ControlPlaneUsers.scheduler).subscribe(Subjects.activityAll, { max: 1 });
      await as(ControlPlaneUsers.scheduler).flush();
      r1().publish(Subjects.activity(R1.poolId, R1.runnerId), "{}");
      for await (const m of heard) expect(m.subject).toBe(Subjects.activity(R1.poolId, R1.runnerId));
    });

    it("cannot mint an API token", async () => {
      const subject = "$KV.tokens.deadbeef";
      expect(await denied(r1(), subject, () => jetstream(r1()).publish(subject, "{}", { timeout: 5_000 }))).toMatch(/permissions violation/i);
    });

    it("cannot publish to the audit stream", async () => {
      const subject = "paddock.audit.default.session.s1";
      expect(await denied(r1(), subject, () => jetstream(r1()).publish(subject, "{}", { timeout: 5_000 }))).toMatch(/permissions violation/i);
      expect(await denied(r1(), subject, () => r1().publish(subject, "{}"))).toMatch(/permissions violation/i);
      expect((await (await jetstreamManager(admin())).streams.info("AUDIT")).state.messages).toBe(0);
    });

    it("cannot publish facts as another runner", async () => {
      const subject = "paddock.runner.default.r2.events";
      expect(await denied(r1(), subject, () => jetstream(r1()).publish(subject, "{}", { timeout: 5_000 }))).toMatch(/permissions violation/i);
    });

    it("cannot register as another runner, nor on the shared registration subject", async () => {
      for (const subject of [Subjects.register(R2.poolId, R2.runnerId), "paddock.fleet.v1.register"]) {
        expect(await denied(r1(), subject, () => r1().publish(subject, "{}"))).toMatch(/permissions violation/i);
      }
    });

    it("cannot publish dispatch commands or listen on DISPATCH subjects", async () => {
      const subject = "paddock.dispatch.default.r1";
      expect(await denied(r1(), subject, () => jetstream(r1()).publish(subject, "{}", { timeout: 5_000 }))).toMatch(/permissions violation/i);
      expect(await denied(r1(), "paddock.dispatch.>", () => r1().subscribe("paddock.dispatch.>"))).toMatch(/permissions violation/i);
    });

    it("cannot consume another runner's dispatch durable", async () => {
      const durable = runnerUser(R2.poolId, R2.runnerId);
      expect(await denied(r1(), `$JS.API.CONSUMER.INFO.DISPATCH.${durable}`, () => jetstream(r1()).consumers.get("DISPATCH", durable))).toMatch(
        /permissions violation/i,
      );
      const next = `$JS.API.CONSUMER.MSG.NEXT.DISPATCH.${durable}`;
      expect(await denied(r1(), next, () => r1().request(next, JSON.stringify({ batch: 1, expires: 1_000_000_000 }), { timeout: 5_000 }))).toMatch(
        /permissions violation/i,
      );
    });

    it("cannot point its own durable (or an ephemeral consumer) at another runner's dispatch subject", async () => {
      const jsm = await jetstreamManager(r1());
      const mine = runnerUser(R1.poolId, R1.runnerId);
      const own = `$JS.API.CONSUMER.CREATE.DISPATCH.${mine}.paddock.dispatch.default.r2`;
      const retarget = () => jsm.consumers.add("DISPATCH", { durable_name: mine, filter_subject: "paddock.dispatch.default.r2", ack_policy: AckPolicy.Explicit });
      expect(await denied(r1(), own, retarget)).toMatch(/permissions violation/i);
      const ephemeral = "$JS.API.CONSUMER.CREATE.DISPATCH";
      expect(await denied(r1(), ephemeral, () => jsm.consumers.add("DISPATCH", { filter_subject: "paddock.dispatch.default.r2" }))).toMatch(
        /permissions violation/i,
      );
      expect(await denied(r1(), "$JS.API.DIRECT.GET.DISPATCH", () => jsm.direct.getMessage("DISPATCH", { last_by_subj: "paddock.dispatch.default.r2" }))).toMatch(
        /permissions violation/i,
      );
    });

    it("cannot change, purge or delete streams", async () => {
      const jsm = await jetstreamManager(r1());
      expect(await denied(r1(), "$JS.API.STREAM.UPDATE.AUDIT", () => jsm.streams.update("AUDIT", { max_age: 1_000_000_000 }))).toMatch(/permissions violation/i);
      expect(await denied(r1(), "$JS.API.STREAM.DELETE.KV_sessions", () => jsm.streams.delete("KV_sessions"))).toMatch(/permissions violation/i);
      expect(await denied(r1(), "$JS.API.STREAM.PURGE.TERM", () => jsm.streams.purge("TERM"))).toMatch(/permissions violation/i);
      expect(await denied(r1(), "$JS.API.STREAM.CREATE.EVIL", () => jsm.streams.add({ name: "EVIL", subjects: ["evil.>"] }))).toMatch(/permissions violation/i);
    });

    it("cannot add, replace or delete objects in another runner's stores or the shared ones, nor purge them; reads them, and writes its own", async () => {
      // r2 provisions its own stores and writes a checkpoint there (its own, allowed).
      await provision(as(runnerUser(R2.poolId, R2.runnerId)), { replicas: 1, runner: R2 });
      await provision(r1(), { replicas: 1, runner: R1 });
      const theirs = runnerObjectStore(ObjectStores.checkpoints, R2.poolId, R2.runnerId);
      await (await new Objm(as(runnerUser(R2.poolId, R2.runnerId))).open(theirs)).putBlob({ name: "ws/s2/1-a" }, new TextEncoder().encode("r2's sealed bytes"));
      const os = await new Objm(r1()).open(theirs);
      expect(new TextDecoder().decode((await os.getBlob("ws/s2/1-a")) ?? new Uint8Array())).toBe("r2's sealed bytes");
      const meta = `$O.${theirs}.M.`;
      expect(await denied(r1(), meta, () => os.delete("ws/s2/1-a"))).toMatch(/permissions violation/i);
      expect(await denied(r1(), `$O.${theirs}.C.`, () => os.putBlob({ name: "ws/s2/1-a" }, new TextEncoder().encode("replaced")))).toMatch(/permissions violation/i);
      expect(await denied(r1(), `$O.${theirs}.C.`, () => os.putBlob({ name: "ws/s2/1-new" }, new TextEncoder().encode("planted")))).toMatch(/permissions violation/i);
      const jsm = await jetstreamManager(r1());
      expect(await denied(r1(), `$JS.API.STREAM.PURGE.OBJ_${theirs}`, () => jsm.streams.purge(`OBJ_${theirs}`))).toMatch(/permissions violation/i);
      expect(await denied(r1(), `$JS.API.STREAM.MSG.DELETE.OBJ_${theirs}`, () => jsm.streams.deleteMessage(`OBJ_${theirs}`, 1))).toMatch(/permissions violation/i);
      // The shared (legacy) stores are read-only for every runner.
      const shared = await new Objm(r1()).open(ObjectStores.checkpoints);
      expect(await denied(r1(), `$O.${ObjectStores.checkpoints}.C.`, () => shared.putBlob({ name: "x" }, new TextEncoder().encode("x")))).toMatch(/permissions violation/i);
      expect(await denied(r1(), `$JS.API.STREAM.PURGE.OBJ_${ObjectStores.envSnapshots}`, () => jsm.streams.purge(`OBJ_${ObjectStores.envSnapshots}`))).toMatch(/permissions violation/i);
      // r2's object is intact; r1 writes (and may delete) in its own store.
      const intact = await new Objm(admin()).open(theirs);
      expect(new TextDecoder().decode((await intact.getBlob("ws/s2/1-a")) ?? new Uint8Array())).toBe("r2's sealed bytes");
      expect((await intact.list()).map((i) => i.name)).toEqual(["ws/s2/1-a"]);
      const mine = await new Objm(r1()).open(runnerObjectStore(ObjectStores.checkpoints, R1.poolId, R1.runnerId));
      await mine.putBlob({ name: "ws/s1/1-a" }, new TextEncoder().encode("r1's"));
      expect(await mine.delete("ws/s1/1-a")).toMatchObject({ success: true });
    });

    it("cannot serve another runner's workspace requests", async () => {
      const subject = "paddock.workspace.default.r2.pull";
      expect(await denied(r1(), subject, () => r1().subscribe(subject, { queue: "workspace-r2" }))).toMatch(/permissions violation/i);
    });

    it("writes its own lease (with a per-message TTL), facts and terminal logs, reads its own record and last chunks, hears its own input", async () => {
      const js = jetstream(r1());
      await js.publish("$KV.runner-leases.default.r1", JSON.stringify({ runnerId: "r1" }), { ttl: "10s" });
      expect((await (await new Kvm(admin()).open("runner-leases")).get("default.r1"))?.string()).toContain("r1");
      const ack = await js.publish("paddock.runner.default.r1.events", "{}", { msgID: "s1-1-running" });
      expect(ack.stream).toBe("RUNNER");
      await (await new Kvm(admin()).open("runners")).put("default.r1", JSON.stringify({ id: "r1", generation: 3 }));
      expect((await (await new Kvm(r1()).open("runners", { allow_direct: true })).get("default.r1"))?.json()).toEqual({ id: "r1", generation: 3 });
      const own = Subjects.term(R1.poolId, R1.runnerId, "s1", "main");
      const term = await js.publish(own, "hello", { expect: { lastSubjectSequence: 0, lastSubjectSequenceSubject: Subjects.termOfApp("s1", "main") } });
      expect(term.stream).toBe("TERM");
      expect((await (await jetstreamManager(r1())).direct.getMessage("TERM", { last_by_subj: own }))?.seq).toBe(term.seq);
      // Its own screen checkpoints, which the gateway reads by direct get.
      const screen = Subjects.screen(R1.poolId, R1.runnerId, "s1", "main");
      expect((await js.publish(screen, "{}")).stream).toBe("SCREENS");
      expect((await (await jetstreamManager(as(ControlPlaneUsers.gateway))).direct.getMessage("SCREENS", { last_by_subj: screen }))?.string()).toBe("{}");
      const input = r1().subscribe(Subjects.inputOfRunner(R1.poolId, R1.runnerId), { max: 1 });
      await r1().flush();
      as(ControlPlaneUsers.gateway).publish(Subjects.input(R1.poolId, R1.runnerId, "s1", "main"), "keys");
      for await (const m of input) expect(m.string()).toBe("keys");
    });

    it("consumes and acks its own dispatch durable", async () => {
      await jetstream(as(ControlPlaneUsers.scheduler)).publish("paddock.dispatch.default.r1", JSON.stringify({ type: "start" }));
      const consumer = await jetstream(r1()).consumers.get("DISPATCH", runnerUser(R1.poolId, R1.runnerId));
      const m = await consumer.next({ expires: 5_000 });
      expect(m?.subject).toBe("paddock.dispatch.default.r1");
      expect(await m?.ackAck()).toBe(true);
      const info = await (await jetstreamManager(admin())).consumers.info("DISPATCH", runnerUser(R1.poolId, R1.runnerId));
      expect(info.num_ack_pending).toBe(0);
    });

    it("runs provision against existing storage without needing STREAM.UPDATE", async () => {
      await provision(r1(), { replicas: 1 });
    });
  });

  describe("control-plane services", () => {
    it("the gateway cannot write session records, dispatch, or publish audit events", async () => {
      const gw = as(ControlPlaneUsers.gateway);
      for (const subject of ["$KV.sessions.default.s1", "paddock.dispatch.default.r1", "paddock.audit.default.session.s1", "paddock.runner.default.r1.events", Subjects.screen(R1.poolId, R1.runnerId, "s1", "main")]) {
        expect(await denied(gw, subject, () => jetstream(gw).publish(subject, "{}", { timeout: 5_000 }))).toMatch(/permissions violation/i);
      }
    });

    it("the gateway reads a session record from the stream's leader, and cannot watch the records (decision 0071)", async () => {
      await (await new Kvm(admin()).open("sessions")).put("default.s-read", JSON.stringify({ id: "s-read" }));
      const gw = as(ControlPlaneUsers.gateway);
      expect((await readLatestFromLeader(await jetstreamManager(gw), "sessions", "default.s-read"))?.value).toEqual(new TextEncoder().encode(JSON.stringify({ id: "s-read" })));
      const watch = `$JS.API.CONSUMER.CREATE.KV_sessions`;
      expect(await denied(gw, watch, () => jetstreamManager(gw).then((m) => m.consumers.add("KV_sessions", { ack_policy: AckPolicy.None, deliver_policy: DeliverPolicy.LastPerSubject })))).toMatch(/permissions violation/i);
    });

    it("the event-recorder cannot write any KV bucket or dispatch", async () => {
      const rec = as(ControlPlaneUsers.recorder);
      for (const subject of ["$KV.sessions.default.s1", "$KV.tokens.x", "paddock.dispatch.default.r1"]) {
        expect(await denied(rec, subject, () => jetstream(rec).publish(subject, "{}", { timeout: 5_000 }))).toMatch(/permissions violation/i);
      }
    });

    it("the scheduler cannot publish audit events, terminal output or runner facts", async () => {
      const s = as(ControlPlaneUsers.scheduler);
      for (const subject of ["paddock.audit.default.session.s1", Subjects.term(R1.poolId, R1.runnerId, "s1", "main"), "paddock.runner.default.r1.events"]) {
        expect(await denied(s, subject, () => jetstream(s).publish(subject, "{}", { timeout: 5_000 }))).toMatch(/permissions violation/i);
      }
    });
  });
});

describe("the whole stack with per-service credentials", () => {
  const INTRUDER = { poolId: "default", runnerId: "intruder" };
  let stack: Stack;
  let nc: NatsConnection;
  let intruder: NatsConnection;
  let logDir: string;
  const logFile = () => join(logDir, "nats.log");

  beforeAll(async () => {
    logDir = mkdtempSync(join(tmpdir(), "paddock-nats-log-"));
    // `intruder` is a declared runner with its own credentials that never runs an agent: the tests act as it.
    stack = await startStack({
      isolated: { runners: [{ poolId: "default", runnerId: "runner-1" }, INTRUDER], extraConfig: `log_file: ${JSON.stringify(join(logDir, "nats.log"))}\n` },
      // Held checks every 200 ms, so the permission check below covers them too.
      env: { "runner-agent": { PADDOCK_RUNNER_HELD_CHECK_MS: "200" }, gateway: { PADDOCK_WEBHOOK_ALLOW_PRIVATE: "1" }, "event-recorder": { PADDOCK_WEBHOOK_ALLOW_PRIVATE: "1" } },
    });
    const users = stack.natsUsers ?? {};
    nc = await connectAs(stack.nats.url, ControlPlaneUsers.provisioner, users[ControlPlaneUsers.provisioner] ?? "");
    intruder = await connectAs(stack.nats.url, runnerUser(INTRUDER.poolId, INTRUDER.runnerId), users[runnerUser(INTRUDER.poolId, INTRUDER.runnerId)] ?? "");
  });
  afterAll(async () => {
    await nc?.close();
    await intruder?.close();
    await stack?.stop();
    rmSync(logDir, { recursive: true, force: true });
  });

  it("runs a session end to end", async () => {
    const created = await api(stack.url, stack.token, "POST", "/v1/sessions", {
      spec: { cmd: ["sh", "-c", "printf 'ready\\n'; read line; printf 'got:%s\\n' \"$line\"; exit 7"] },
    });
    expect(created.status).toBe(201);
    const session = sessionOf(created);
    // Another runner writes into the session's log under its own subject, claiming the current generation.
    const h = headers();
    h.set(Headers.placementGeneration, "1");
    await jetstream(intruder).publish(Subjects.term(INTRUDER.poolId, INTRUDER.runnerId, session.id, "main"), "FORGED-BY-INTRUDER\n", { headers: h });
    const controller = await Terminal.open(stack.url, stack.token, session.id, "mode=controller&since=all");
    await controller.until((t) => t.output().includes("ready"));
    controller.ws.send(Buffer.from("hello\n"));
    await controller.until((t) => t.textFrames().some((f) => f.type === "exit"));
    expect(controller.output()).toContain("got:hello");
    await controller.closed;
    await waitForAuditEvents(nc, "default", session.id, (evs) => evs.some((e) => e.action === "exit"));
    const dead = sessionOf(await api(stack.url, stack.token, "GET", `/v1/sessions/${session.id}`));
    expect(dead).toMatchObject({ state: "dead", childExitCode: 7, runnerId: "runner-1" });
    const replay = await Terminal.open(stack.url, stack.token, session.id, "since=all");
    await replay.closed;
    expect(replay.output()).toBe(controller.output());
    expect(controller.output()).not.toContain("FORGED");
    const log = await api(stack.url, stack.token, "GET", `/v1/sessions/${session.id}/log`);
    expect(String(log.body)).toContain("got:hello");
    expect(String(log.body)).not.toContain("FORGED");
    const events = await api(stack.url, stack.token, "GET", `/v1/events?sessionId=${session.id}`);
    expect(events.status).toBe(200);
  });

  it("cold-suspends into the checkpoint store and resumes with the workspace restored", async () => {
    const script = "if [ -f state ]; then echo restored:$(cat state); else echo first > state; echo wrote; fi; exec sleep 600";
    const s = sessionOf(await api(stack.url, stack.token, "POST", "/v1/sessions", { spec: { cmd: ["sh", "-c", script] } }));
    const before = await Terminal.open(stack.url, stack.token, s.id, "mode=viewer&since=all");
    await before.until((t) => t.output().includes("wrote"));
    before.ws.close();
    // The app's output can show before its running fact is committed: a suspend asks of a running session.
    await api(stack.url, stack.token, "GET", `/v1/sessions/${s.id}?waitFor=running&timeoutMs=60000`);
    const suspended = await api(stack.url, stack.token, "POST", `/v1/sessions/${s.id}/suspend`, { warm: false });
    expect(sessionOf(suspended)).toMatchObject({ state: "suspended_cold", checkpoint: { format: "manifest+aes256gcm" } });
    const resumed = await api(stack.url, stack.token, "POST", `/v1/sessions/${s.id}/resume`, {});
    expect(sessionOf(resumed)).toMatchObject({ state: "running", placementGeneration: 2 });
    const after = await Terminal.open(stack.url, stack.token, s.id, "mode=viewer&since=all");
    await after.until((t) => t.output().includes("restored:first"));
    after.ws.close();
    expect((await api(stack.url, stack.token, "DELETE", `/v1/sessions/${s.id}`)).status).toBeLessThan(300);
  });

  it("another runner can neither delete nor replace runner-1's checkpoint: the session resumes from it", async () => {
    const script = "if [ -f state ]; then echo restored:$(cat state); else echo kept > state; echo wrote; fi; exec sleep 600";
    const s = sessionOf(await api(stack.url, stack.token, "POST", "/v1/sessions", { spec: { cmd: ["sh", "-c", script] } }));
    const before = await Terminal.open(stack.url, stack.token, s.id, "mode=viewer&since=all");
    await before.until((t) => t.output().includes("wrote"));
    before.ws.close();
    // The app's output can show before its running fact is committed: a suspend asks of a running session.
    await api(stack.url, stack.token, "GET", `/v1/sessions/${s.id}?waitFor=running&timeoutMs=60000`);
    const ref = sessionOf(await api(stack.url, stack.token, "POST", `/v1/sessions/${s.id}/suspend`, { warm: false })).checkpoint?.ref ?? "";
    const [store = "", ...path] = ref.split("/");
    expect(store).toBe(runnerObjectStore(ObjectStores.checkpoints, "default", "runner-1"));
    const os = await new Objm(intruder).open(store);
    expect(await denied(intruder, `$O.${store}.M.`, () => os.delete(path.join("/")))).toMatch(/permissions violation/i);
    expect(await denied(intruder, `$O.${store}.C.`, () => os.putBlob({ name: path.join("/") }, new TextEncoder().encode("garbage")))).toMatch(/permissions violation/i);
    const jsm = await jetstreamManager(intruder);
    expect(await denied(intruder, `$JS.API.STREAM.PURGE.OBJ_${store}`, () => jsm.streams.purge(`OBJ_${store}`))).toMatch(/permissions violation/i);
    // Its chunks (the checkpoint is a manifest naming them): readable, as a takeover needs, but neither replaced nor purged.
    const chunks = runnerChunkStream("default", "runner-1");
    // Listed as the operator (a runner may not ask another's stream for its subjects).
    const subjects = Object.keys((await (await jetstreamManager(nc)).streams.info(chunks, { subjects_filter: ">" })).state.subjects ?? {});
    expect(subjects.length).toBeGreaterThan(0);
    const chunkSubject = subjects[0] ?? "";
    expect((await jsm.direct.getMessage(chunks, { last_by_subj: chunkSubject }))?.data.length).toBeGreaterThan(0);
    expect(await denied(intruder, chunkSubject, () => jetstream(intruder).publish(chunkSubject, new TextEncoder().encode("garbage")))).toMatch(/permissions violation/i);
    expect(await denied(intruder, `$JS.API.STREAM.PURGE.${chunks}`, () => jsm.streams.purge(chunks, { filter: chunkSubject }))).toMatch(/permissions violation/i);
    expect(sessionOf(await api(stack.url, stack.token, "POST", `/v1/sessions/${s.id}/resume`, {}))).toMatchObject({ state: "running", placementGeneration: 2 });
    const after = await Terminal.open(stack.url, stack.token, s.id, "mode=viewer&since=all");
    await after.until((t) => t.output().includes("restored:kept"));
    after.ws.close();
    expect((await api(stack.url, stack.token, "DELETE", `/v1/sessions/${s.id}`)).status).toBeLessThan(300);
  });

  it("another runner gets no secret of a session placed elsewhere, whatever it claims", async () => {
    const s = sessionOf(await api(stack.url, stack.token, "POST", "/v1/sessions", { spec: { cmd: ["sh", "-c", "exec sleep 600"] } }));
    const ask = (runnerId: string) =>
      callRpc(intruder, FleetRpc.sessionSecrets, { poolId: "default", runnerId, workspaceId: "default", sessionId: s.id, placementGeneration: 1, names: [] });
    // Naming the holder: the answer would go to the intruder's inbox, not the holder's.
    await expect(ask("runner-1")).rejects.toMatchObject({ code: "forbidden" });
    // Naming itself: the record does not place the session there.
    await expect(ask(INTRUDER.runnerId)).rejects.toMatchObject({ code: "not_found" });
    expect((await api(stack.url, stack.token, "DELETE", `/v1/sessions/${s.id}`)).status).toBeLessThan(300);
  });

  it("another runner's held check naming runner-1 is refused: the answer would go to the intruder's inbox", async () => {
    const s = sessionOf(await api(stack.url, stack.token, "POST", "/v1/sessions", { spec: { cmd: ["sh", "-c", "exec sleep 600"] } }));
    const sessions = [{ workspaceId: "default", sessionId: s.id, placementGeneration: 1 }];
    await expect(callRpc(intruder, FleetRpc.heldCheck, { poolId: "default", runnerId: "runner-1", runnerGeneration: 1, sessions })).rejects.toMatchObject({ code: "forbidden" });
    expect((await api(stack.url, stack.token, "DELETE", `/v1/sessions/${s.id}`)).status).toBeLessThan(300);
  });

  /** Resolves once the schedulers' facts consumer has settled every fact up to seq (consumer info has no watch). */
  async function factsSettledThrough(seq: number): Promise<void> {
    const jsm = await jetstreamManager(nc);
    while ((await jsm.consumers.info("RUNNER", "scheduler")).ack_floor.stream_seq < seq) await new Promise((r) => setTimeout(r, 20));
  }

  async function runningOnRunner1(): Promise<{ id: string; generation: number }> {
    const s = sessionOf(await api(stack.url, stack.token, "POST", "/v1/sessions", { spec: { cmd: ["sh", "-c", "exec sleep 600"] } }));
    await waitForAuditEvents(nc, "default", s.id, (evs) => evs.some((e) => e.action === "start"));
    const running = sessionOf(await api(stack.url, stack.token, "GET", `/v1/sessions/${s.id}`));
    expect(running).toMatchObject({ state: "running", runnerId: "runner-1" });
    const record = (await (await new Kvm(nc).open("runners")).get("default.runner-1"))?.json<{ generation: number }>();
    return { id: s.id, generation: record?.generation ?? 0 };
  }

  it("another runner's fact about a session on runner-1 is never applied, whatever runner it names", async () => {
    const s = await runningOnRunner1();
    // Published under the intruder's own subject (all its credentials allow), naming runner-1 and its generations.
    const forged = { type: "exited", runnerId: "runner-1", poolId: "default", runnerGeneration: s.generation, sessionId: s.id, workspaceId: "default", placementGeneration: 1, at: Date.now(), exitCode: 0 };
    const ack = await jetstream(intruder).publish(Subjects.runnerEvents(INTRUDER.poolId, INTRUDER.runnerId), JSON.stringify(forged));
    await factsSettledThrough(ack.seq);
    expect(sessionOf(await api(stack.url, stack.token, "GET", `/v1/sessions/${s.id}`))).toMatchObject({ state: "running", runnerId: "runner-1" });
    expect((await api(stack.url, stack.token, "DELETE", `/v1/sessions/${s.id}`)).status).toBeLessThan(300);
  });

  it("another runner cannot register as runner-1: not on its subject, nor by naming it on its own", async () => {
    const s = await runningOnRunner1();
    const claim = { runnerId: "runner-1", poolId: "default", generation: s.generation + 1, capacityTotal: 1, capabilities: [], sessions: [] };
    const theirs = Subjects.register("default", "runner-1");
    expect(await denied(intruder, theirs, () => intruder.publish(theirs, JSON.stringify(claim)))).toMatch(/permissions violation/i);
    // On its own subject the body names runner-1: refused without effect or answer. Its own registration, asked next, is answered.
    intruder.publish(Subjects.register(INTRUDER.poolId, INTRUDER.runnerId), JSON.stringify(claim), { reply: `${inboxPrefixOf(runnerUser(INTRUDER.poolId, INTRUDER.runnerId))}.forged` });
    const own = { ...claim, runnerId: INTRUDER.runnerId, generation: 1, capacityTotal: 0 };
    const answer = await intruder.request(Subjects.register(INTRUDER.poolId, INTRUDER.runnerId), JSON.stringify(own), { timeout: 10_000 });
    expect(answer.json()).toMatchObject({ accepted: true, generation: 1 });
    const record = (await (await new Kvm(nc).open("runners")).get("default.runner-1"))?.json<{ generation: number; state: string }>();
    expect(record).toMatchObject({ generation: s.generation, state: "active" });
    expect(sessionOf(await api(stack.url, stack.token, "GET", `/v1/sessions/${s.id}`))).toMatchObject({ state: "running", runnerId: "runner-1" });
    expect((await api(stack.url, stack.token, "DELETE", `/v1/sessions/${s.id}`)).status).toBeLessThan(300);
  });

  it("delivers a webhook (its record, its AUDIT consumer, its deliveries record) and removes it", async () => {
    let deliver: (body: string) => void = () => undefined;
    const got = new Promise<string>((resolve) => (deliver = resolve));
    const receiver = createServer((req, res) => {
      let body = "";
      req.on("data", (c: Buffer) => (body += c.toString()));
      req.on("end", () => {
        res.end();
        deliver(body);
      });
    });
    await new Promise<void>((resolve) => receiver.listen(0, "127.0.0.1", resolve));
    try {
      const hook = await api(stack.url, stack.token, "POST", "/v1/webhooks", { url: `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/`, events: ["session.create"] });
      expect(hook.status).toBe(201);
      const created = await api(stack.url, stack.token, "POST", "/v1/sessions", { spec: { cmd: ["sleep", "60"] } });
      const id = sessionOf(created).id;
      expect(JSON.parse(await got)).toMatchObject({ type: "session.create", data: { resource: { id } } });
      expect((await api(stack.url, stack.token, "DELETE", `/v1/webhooks/${(hook.body as { id: string }).id}`)).status).toBe(200);
      expect((await api(stack.url, stack.token, "DELETE", `/v1/sessions/${id}`)).status).toBeLessThan(300);
    } finally {
      await new Promise<void>((resolve) => receiver.close(() => resolve()));
    }
  });

  it("needed no permission it was not granted (server log)", () => {
    const violations = readFileSync(logFile(), "utf8")
      .split("\n")
      .filter((l) => /violation/i.test(l))
      // The intruder's own attempts are not the services'.
      .filter((l) => !l.includes(runnerUser(INTRUDER.poolId, INTRUDER.runnerId)));
    expect(violations).toEqual([]);
  });
});
