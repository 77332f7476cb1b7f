import { createHash, randomBytes } from "node:crypto";
import { Writable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Kvm, type KV } from "@nats-io/kv";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { createBusMetrics, provision, SecretBox, serveRpc } from "@paddock/bus";
import { Buckets, FleetRpc, ForbiddenError, secretKey, type BootEnvironment, type DispatchCommand } from "@paddock/contracts";
import { createLogger, silentLogger } from "@paddock/logging";
import { startNatsServer, type NatsServerHandle } from "@paddock/testing";
import { BootError } from "../errors.ts";
import { RpcSecretResolver } from "./secrets.ts";
import { collectFacts, collectTerm, dispatchTo, fakeScheduler, testAgent, type TestAgent } from "../testing/test-support.ts";

const KEY = randomBytes(32);
const box = new SecretBox(KEY);
let server: NatsServerHandle;
let nc: NatsConnection;
let kv: KV;
const agents: TestAgent[] = [];
const ctx = (workspaceId: string) => ({ workspaceId, sessionId: "s1", placementGeneration: 1, environmentId: "env1" });
const RUNNER = { poolId: "default", runnerId: "r1" };
const store = (ws: string, name: string, value: string) => kv.put(secretKey(ws, name), new SecretBox(KEY).seal(secretKey(ws, name), value));

beforeAll(async () => {
  server = await startNatsServer();
  nc = await connect({ servers: server.url });
  await provision(nc, { replicas: 1 });
  kv = await new Kvm(nc).open(Buckets.secrets);
  // Stands in for the scheduler's FleetRpc.sessionSecrets (whose authorization is tested with the scheduler):
  // hands out the stored envelopes, and refuses a session named "refused".
  serveRpc(
    nc,
    FleetRpc.sessionSecrets,
    async (req) => {
      if (req.sessionId === "refused") throw new ForbiddenError("only secrets the session's environment references are released");
      const secrets = await Promise.all(
        req.names.map(async (name) => {
          const e = await kv.get(secretKey(req.workspaceId, name));
          return e?.operation === "PUT" ? { name, envelope: Buffer.from(e.value).toString("base64") } : { name };
        }),
      );
      return { secrets };
    },
    { metrics: createBusMetrics(), log: silentLogger() },
  );
});
afterAll(async () => {
  for (const t of agents) await t.agent.stop();
  await nc.drain();
  await server.stop();
});

describe("RpcSecretResolver", () => {
  it("asks for the session token at boot, and waits out a moment with no scheduler answering", async () => {
    // A bus of its own, where nobody answers at first.
    const lone = await startNatsServer();
    const c = await connect({ servers: lone.url });
    try {
      const asked: unknown[] = [];
      let waits = 0;
      const schedulerComesBack = async () => {
        waits++;
        serveRpc(
          c,
          FleetRpc.sessionSecrets,
          (req) => {
            asked.push(req);
            return Promise.resolve({ secrets: [], sessionToken: "pdk_ses_0123456789abcdef" });
          },
          { metrics: createBusMetrics(), log: silentLogger() },
        );
        await c.flush();
      };
      const r = new RpcSecretResolver(c, KEY, RUNNER, 10_000, schedulerComesBack);
      expect(await r.boot([], ctx("wsA"))).toEqual({ values: {}, sessionToken: "pdk_ses_0123456789abcdef" });
      expect(waits).toBe(1);
      expect(asked).toMatchObject([{ ...RUNNER, sessionId: "s1", names: [], token: true }]);
    } finally {
      await c.close();
      await lone.stop();
    }
  });

  it("asks again when an answer is lost (a broker failover), within the budget", async () => {
    const lone = await startNatsServer();
    const c = await connect({ servers: lone.url });
    try {
      let calls = 0;
      serveRpc(
        c,
        FleetRpc.sessionSecrets,
        () => {
          calls++;
          // The first answer never comes (lost with a failing broker node); the next one does.
          if (calls === 1) return new Promise<never>(() => undefined);
          return Promise.resolve({ secrets: [], sessionToken: "pdk_ses_0123456789abcdef" });
        },
        { metrics: createBusMetrics(), log: silentLogger() },
      );
      await c.flush();
      const r = new RpcSecretResolver(c, KEY, RUNNER, 30_000, () => Promise.resolve(), 200);
      expect(await r.boot([], ctx("wsA"))).toEqual({ values: {}, sessionToken: "pdk_ses_0123456789abcdef" });
      expect(calls).toBe(2);
    } finally {
      await c.close();
      await lone.stop();
    }
  });

  it("resolves refs of the session's workspace only", async () => {
    await store("wsA", "TOKEN", "value-a");
    await store("wsB", "TOKEN", "value-b");
    await store("wsA", "OTHER", "other-a");
    const r = new RpcSecretResolver(nc, KEY, RUNNER);
    expect(await r.resolve(["TOKEN", "OTHER"], ctx("wsA"))).toEqual({ TOKEN: "value-a", OTHER: "other-a" });
    expect(await r.resolve(["TOKEN"], ctx("wsB"))).toEqual({ TOKEN: "value-b" });
    expect(await r.resolve([], ctx("wsB"))).toEqual({});
  });

  it("fails with the name only: missing, deleted, undecryptable, moved across workspaces, bad names", async () => {
    const r = new RpcSecretResolver(nc, KEY, RUNNER);
    const reason = async (refs: string[], ws = "wsA") => {
      const err = await r.resolve(refs, ctx(ws)).then(() => undefined, (e: unknown) => e);
      expect(err).toBeInstanceOf(BootError);
      return (err as Error).message;
    };
    expect(await reason(["OTHER", "MISSING"])).toBe("secret MISSING is not set");
    await store("wsA", "GONE", "gone-value");
    await kv.purge(secretKey("wsA", "GONE"));
    expect(await reason(["GONE"])).toBe("secret GONE is not set");
    // A record sealed for wsA copied under wsC does not open (the key is bound as AAD).
    await kv.put(secretKey("wsC", "TOKEN"), box.seal(secretKey("wsA", "TOKEN"), "value-a"));
    expect(await reason(["TOKEN"], "wsC")).toBe("secret TOKEN could not be read");
    // Plaintext planted by a writer without the key is refused when a key is configured.
    await kv.put(secretKey("wsC", "PLAIN"), new SecretBox(undefined).seal(secretKey("wsC", "PLAIN"), "planted-value"));
    expect(await reason(["PLAIN"], "wsC")).toBe("secret PLAIN could not be read");
    // Wrong key.
    const wrong = new RpcSecretResolver(nc, randomBytes(32), RUNNER);
    await expect(wrong.resolve(["TOKEN"], ctx("wsA"))).rejects.toThrow(/^secret TOKEN could not be read$/);
    expect(await reason(["*"])).toBe("secret reference is not a valid name");
    // A refusal by the scheduler names its reason, never a value.
    const refused = await r.resolve(["TOKEN"], { ...ctx("wsA"), sessionId: "refused" }).then(() => undefined, (e: unknown) => e);
    expect(refused).toBeInstanceOf(BootError);
    expect((refused as Error).message).toBe("secrets refused: only secrets the session's environment references are released");

    expect(await reason(["A.B"])).toBe("secret reference is not a valid name");
  });

  it("without a key stores and reads plain envelopes", async () => {
    await kv.put(secretKey("wsP", "P"), new SecretBox(undefined).seal(secretKey("wsP", "P"), "plain-value"));
    expect(await new RpcSecretResolver(nc, undefined, RUNNER).resolve(["P"], ctx("wsP"))).toEqual({ P: "plain-value" });
  });
});

describe("secrets at boot", () => {
  const lines: string[] = [];
  const log = createLogger({ service: "runner-agent", level: "debug", destination: new Writable({ write: (c: Buffer, _e, cb) => (lines.push(c.toString()), cb()) }) });

  it("injects values into init and the apps (not setup), and a missing one fails the boot naming it", async () => {
    const value = `s3cr3t-${randomBytes(8).toString("hex")}`;
    await store("ws1", "API_KEY", value);
    const scheduler = fakeScheduler(nc, 0);
    const t = testAgent(nc, {}, log, { secrets: new RpcSecretResolver(nc, KEY, RUNNER) });
    agents.push(t);
    const facts = collectFacts(nc, t.config.poolId, t.config.runnerId);
    await t.agent.start();
    scheduler.sub.unsubscribe();
    const env = (extra: Partial<BootEnvironment> = {}): BootEnvironment => ({
      environmentId: `env-${randomBytes(4).toString("hex")}`,
      setupHash: randomBytes(4).toString("hex"),
      setup: 'echo "setup:${API_KEY:-unset}" > setup.txt',
      init: 'printf %s "$API_KEY" | sha256sum > init.txt',
      secretRefs: ["API_KEY"],
      ...extra,
    });
    const start = (sessionId: string, environment: BootEnvironment) =>
      dispatchTo(nc, t, {
        type: "start",
        sessionId,
        workspaceId: "ws1",
        runnerGeneration: t.agent.generation,
        placementGeneration: 1,
        spec: { cmd: ["sh", "-c", 'cat setup.txt; echo "init:$(cat init.txt)"; printf %s "$API_KEY" | sha256sum'] },
        mode: "run",
        trigger: "initial",
        environment,
      } as DispatchCommand);

    const term = collectTerm(nc, "sec1", "main");
    await start("sec1", env());
    await facts.waitFor((f) => f.sessionId === "sec1" && f.type === "exited");
    const digest = createHash("sha256").update(value).digest("hex");
    const out = term.text();
    expect(out).toContain("setup:unset");
    expect(out).toContain(`init:${digest}`);
    expect(out.split(digest).length - 1).toBe(2);
    expect(out).not.toContain(value);

    await start("sec2", env({ secretRefs: ["API_KEY", "NOT_THERE"] }));
    const failed = await facts.waitFor((f) => f.sessionId === "sec2" && f.type === "failed");
    expect(failed).toMatchObject({ type: "failed", reason: "secret NOT_THERE is not set" });
    expect(JSON.stringify(facts.items)).not.toContain(value);
    expect(lines.join("")).not.toContain(value);
    expect(lines.join("")).toContain("secret NOT_THERE is not set");
  });
});
