/**
 * Secrets (issue 7, item 5) on a real, NATS-isolated stack: an admin stores a
 * value, an environment names it, a session proves it was injected by
 * printing only its sha256; then the raw value is searched for everywhere it
 * must never be: every service's output, the KV records (sessions,
 * environments, tokens: every revision), the AUDIT stream, another session's
 * terminal replay and every error body. At rest it is AES-256-GCM sealed.
 */
import { createHash, randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { jetstreamManager, type JetStreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { Buckets, kvStreamName, secretKey, Streams } from "@paddock/contracts";
import { Kvm } from "@nats-io/kv";
import { connectAs, ControlPlaneUsers, runnerUser, startStack, type Stack } from "@paddock/testing";
import { api, sessionOf, Terminal, waitForAuditEvents } from "./helpers.ts";

const VALUE = `s3cr3t-${randomBytes(12).toString("hex")}`;
const DIGEST = createHash("sha256").update(VALUE).digest("hex");
const KEY = randomBytes(32).toString("hex");

let stack: Stack;
let nc: NatsConnection;
let jsm: JetStreamManager;
const bodies: string[] = [];

beforeAll(async () => {
  const env = { PADDOCK_SECRETS_KEY: KEY };
  stack = await startStack({ isolated: true, env: { gateway: env, "runner-agent": env } });
  nc = await connectAs(stack.nats.url, ControlPlaneUsers.provisioner, stack.natsUsers?.[ControlPlaneUsers.provisioner] ?? "");
  jsm = await jetstreamManager(nc);
});
afterAll(async () => {
  await nc?.drain();
  await stack?.stop();
});

/** Every call's raw body is kept, to be searched for the value at the end. */
async function call(method: string, path: string, body?: unknown, raw?: string, token: string | undefined = stack.token) {
  const r = await api(stack.url, token, method, path, body, raw);
  bodies.push(typeof r.body === "string" ? r.body : JSON.stringify(r.body));
  return r;
}

async function replay(id: string, pred: (text: string) => boolean): Promise<string> {
  const term = await Terminal.open(stack.url, stack.token, id, "since=all");
  await term.until((t) => pred(t.output()));
  term.ws.close();
  return term.output();
}

/** Every stored message (subject, headers, data) of a stream, as one string. */
async function streamText(name: string): Promise<string> {
  const { state } = await jsm.streams.info(name);
  const parts: string[] = [];
  for (let seq = state.first_seq; seq <= state.last_seq && state.messages > 0; seq++) {
    const m = await jsm.streams.getMessage(name, { seq }).catch(() => null);
    if (m) parts.push(m.subject, m.header ? JSON.stringify([...m.header.keys()].map((k) => [k, m.header.get(k)])) : "", Buffer.from(m.data).toString("latin1"));
  }
  return parts.join("\n");
}

describe("secrets", () => {
  it("injects a stored value at boot and it appears nowhere else", { timeout: 120_000 }, async () => {
    expect((await call("PUT", "/v1/secrets/DEPLOY_KEY", { value: VALUE })).status).toBe(204);
    expect((await call("GET", "/v1/secrets")).body).toEqual({ secrets: [{ name: "DEPLOY_KEY" }] });

    // Bad input carrying the value: every answer is an error that does not quote it.
    const refused = [
      await call("PUT", "/v1/secrets/DEPLOY-KEY", { value: VALUE }),
      await call("PUT", "/v1/secrets/DEPLOY_KEY", { value: VALUE, note: VALUE }),
      await call("PUT", "/v1/secrets/DEPLOY_KEY", undefined, `{"value": "${VALUE}"`),
      await call("PUT", "/v1/secrets/DEPLOY_KEY", { value: VALUE + "x".repeat(33 * 1024) }),
      await call("PUT", "/v1/secrets/DEPLOY_KEY", { value: VALUE }, undefined, "pdk_not_a_token"),
      await call("PUT", `/v1/secrets/${VALUE.replace(/-/g, "_")}?q=${VALUE}`, { value: VALUE }),
      await call("POST", "/v1/environments", { name: "bad", secretRefs: [VALUE] }),
    ];
    for (const r of refused) expect(r.status).toBeGreaterThanOrEqual(400);

    const env = await call("POST", "/v1/environments", {
      name: "with-secret",
      setup: 'echo "setup-sees:${DEPLOY_KEY:-nothing}" > setup.txt',
      init: 'printf %s "$DEPLOY_KEY" | sha256sum > init.sha',
      secretRefs: ["DEPLOY_KEY"],
    });
    expect(env.status).toBe(201);
    const envId = (env.body as { id: string }).id;

    const cmd = ["sh", "-c", 'printf %s "$DEPLOY_KEY" | sha256sum; echo "init:$(cat init.sha)"; cat setup.txt; echo done.; exec sleep 600'];
    const s = await call("POST", "/v1/sessions", { environmentId: envId, spec: { cmd } });
    expect(s.status).toBe(201);
    const withSecret = sessionOf(s);
    const out = await replay(withSecret.id, (t) => t.includes("done."));
    expect(out).toContain(`${DIGEST}  -`);
    expect(out).toContain(`init:${DIGEST}`);
    expect(out).toContain("setup-sees:nothing");
    expect(out).not.toContain(VALUE);

    // Another session (no environment) dumps its whole environment: the value is not there.
    const other = sessionOf(await call("POST", "/v1/sessions", { spec: { cmd: ["sh", "-c", "env; echo end-of-env.; exec sleep 600"] } }));
    const otherOut = await replay(other.id, (t) => t.includes("end-of-env."));
    expect(otherOut).not.toContain(VALUE);
    expect(otherOut).not.toContain("DEPLOY_KEY");

    // A reference to an unset secret fails the boot, naming it.
    const missingEnv = await call("POST", "/v1/environments", { name: "missing", secretRefs: ["DEPLOY_KEY", "NOT_STORED"] });
    const missing = sessionOf(await call("POST", "/v1/sessions", { environmentId: (missingEnv.body as { id: string }).id, spec: { cmd: ["true"] } }));
    await waitForAuditEvents(nc, "default", missing.id, (evs) => evs.some((e) => e.action === "fail"));
    const failed = sessionOf(await call("GET", `/v1/sessions/${missing.id}`));
    expect(failed.state).toBe("failed");
    expect(JSON.stringify(failed)).toContain("secret NOT_STORED is not set");

    // Deleted: the next boot fails the same way.
    expect((await call("DELETE", "/v1/secrets/DEPLOY_KEY")).status).toBe(204);
    const after = sessionOf(await call("POST", "/v1/sessions", { environmentId: envId, spec: { cmd: ["true"] } }));
    await waitForAuditEvents(nc, "default", after.id, (evs) => evs.some((e) => e.action === "fail"));
    expect(JSON.stringify(sessionOf(await call("GET", `/v1/sessions/${after.id}`)))).toContain("secret DEPLOY_KEY is not set");

    // Let the recorder catch up on the live sessions too.
    await waitForAuditEvents(nc, "default", withSecret.id, (evs) => evs.some((e) => e.action === "start"));
    await waitForAuditEvents(nc, "default", other.id, (evs) => evs.some((e) => e.action === "start"));

    // Nowhere: logs of every service, KV records (every revision), AUDIT, error bodies, the other replay.
    const services = [stack.scheduler, stack.recorder, stack.gateway, ...stack.runners];
    for (const svc of services) expect(svc.output()).not.toContain(VALUE);
    // (The search is over real output: the runner logged the boots, the gateway the refused start.)
    expect(stack.runners.map((r) => r.output()).join("")).toContain("secret NOT_STORED is not set");
    for (const bucket of [Buckets.sessions, Buckets.environments, Buckets.tokens]) {
      const text = await streamText(kvStreamName(bucket));
      expect(text.length).toBeGreaterThan(0);
      expect(text, bucket).not.toContain(VALUE);
    }
    const audit = await streamText(Streams.audit);
    expect(audit.length).toBeGreaterThan(0);
    expect(audit).not.toContain(VALUE);
    expect(bodies.join("\n")).not.toContain(VALUE);
    const rereplay = await replay(other.id, (t) => t.includes("end-of-env."));
    expect(rereplay).not.toContain(VALUE);
    // At rest the value was sealed (and the purge left no revision of it).
    expect(await streamText(kvStreamName(Buckets.secrets))).not.toContain(VALUE);

    for (const id of [withSecret.id, other.id]) await call("DELETE", `/v1/sessions/${id}`);
  });
});

/** The action fails with a permissions violation (its own error, or the connection's async one). */
async function refused(conn: NatsConnection, action: () => Promise<unknown>): Promise<boolean> {
  const status = (async () => {
    for await (const st of conn.status()) if (st.type === "error" && /permission/i.test(String(st.error))) return true;
    return false;
  })();
  const acted = action().then(
    () => false,
    (err: unknown) => /permission|timeout|TIMEOUT/i.test(`${String(err)} ${String((err as { cause?: unknown }).cause ?? "")}`),
  );
  return Promise.race([status, acted]);
}

describe("who may touch the secret store (NATS permissions)", () => {
  it("the gateway writes, the scheduler reads by key only, runners and the recorder not at all", async () => {
    expect((await call("PUT", "/v1/secrets/PERM_CHECK", { value: "perm-value" })).status).toBe(204);
    const key = secretKey("default", "PERM_CHECK");
    const as = (user: string) => connectAs(stack.nats.url, user, stack.natsUsers?.[user] ?? "", { timeout: 2000 });
    // A fresh connection per check: an async violation is attributed to that check only.
    const check = async (user: string, action: (kv: Awaited<ReturnType<Kvm["open"]>>) => Promise<unknown>): Promise<boolean> => {
      const conn = await as(user);
      try {
        const kv = await new Kvm(conn).open(Buckets.secrets);
        return await refused(conn, () => action(kv));
      } finally {
        await conn.close();
      }
    };
    const plant = (kv: Awaited<ReturnType<Kvm["open"]>>) => kv.put(key, new TextEncoder().encode("planted"));
    const list = async (kv: Awaited<ReturnType<Kvm["open"]>>) => {
      for await (const k of await kv.keys()) void k;
    };
    // The scheduler gets records by key to release them to the runner a session is placed on.
    expect(await check(ControlPlaneUsers.scheduler, async (kv) => expect((await kv.get(key))?.operation).toBe("PUT"))).toBe(false);
    expect(await check(ControlPlaneUsers.scheduler, plant)).toBe(true);
    expect(await check(ControlPlaneUsers.scheduler, list)).toBe(true);
    // A runner gets values only through FleetRpc.sessionSecrets (the boot test above), never from the store.
    for (const user of [runnerUser("default", "runner-1"), ControlPlaneUsers.recorder]) {
      expect(await check(user, (kv) => kv.get(key))).toBe(true);
      expect(await check(user, plant)).toBe(true);
      expect(await check(user, list)).toBe(true);
    }
    // The value still is what the gateway stored (no plant succeeded): it opens under the key.
    const stored = await (await new Kvm(nc).open(Buckets.secrets)).get(key);
    expect(Buffer.from(stored!.value).toString()).toContain("aes-256-gcm");
  });
});
