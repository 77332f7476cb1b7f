/**
 * Runners on remote hosts (issue 29 item 4; docs/decisions/0061-runner-join.md),
 * against a real nats-server whose only runners are joined ones: no runner
 * password anywhere. The gateway answers the server's auth callout; a runner
 * host joins with a one-time token and its own nkey; revoke closes its
 * connection, refuses it, and moves its session to another runner.
 */
import { createHash, randomBytes } from "node:crypto";
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Kvm } from "@nats-io/kv";
import { connect, nkeyAuthenticator, type NatsConnection } from "@nats-io/transport-node";
import { Buckets, inboxPrefixOf, runnerNatsUser, Subjects, type CreatedJoinToken, type Runner, type Session } from "@paddock/contracts";
import { connectAs, ControlPlaneUsers, createAccount, createUser, fromSeed, repoRoot, startService, startStack, tsxBin, untilSession, type ServiceProcess, type Stack } from "@paddock/testing";
import { runCli } from "../../cli/src/testing/run-cli.ts";
import { api, sessionOf } from "./helpers.ts";
import { denied } from "./nats-denied.ts";

let stack: Stack;
let nc: NatsConnection;
let dir: string;
const started: ServiceProcess[] = [];
/** Each joined runner's agent process, by runner id. */
const agents = new Map<string, ServiceProcess>();
const runnerAgentOf = (runnerId: string): ServiceProcess => {
  const agent = agents.get(runnerId);
  if (!agent) throw new Error(`no agent started for ${runnerId}`);
  return agent;
};
const issuer = createAccount();
const system = createUser();

const seedText = (kp: { getSeed(): Uint8Array }) => new TextDecoder().decode(kp.getSeed());
const secretFile = (name: string, text: string): string => {
  const file = join(dir, name);
  writeFileSync(file, text, { mode: 0o600 });
  return file;
};

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "paddock-join-"));
  stack = await startStack({
    runners: 0,
    isolated: { runners: [], callout: { issuer: issuer.getPublicKey(), systemUser: system.getPublicKey() } },
    env: {
      gateway: { PADDOCK_AUTH_CALLOUT_ISSUER_SEED_FILE: secretFile("issuer.seed", seedText(issuer)), PADDOCK_NATS_SYSTEM_SEED_FILE: secretFile("system.seed", seedText(system)) },
    },
  });
  nc = await connectAs(stack.nats.url, ControlPlaneUsers.provisioner, stack.natsUsers?.[ControlPlaneUsers.provisioner] ?? "");
}, 120_000);

afterAll(async () => {
  await Promise.all(started.map((s) => s.kill()));
  await nc.close();
  await stack.stop();
  rmSync(dir, { recursive: true, force: true });
});

const mint = async (poolId = "default"): Promise<string> => {
  const res = await api(stack.url, stack.token, "POST", "/v1/runners/join-tokens", { poolId });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return (res.body as CreatedJoinToken).token;
};
const joinRaw = (body: unknown) => api(stack.url, undefined, "POST", "/v1/runners/join", body);
const identityKeys = async (): Promise<string[]> => {
  const kv = await new Kvm(nc).open(Buckets.runnerIdentities);
  const keys: string[] = [];
  for await (const k of await kv.keys()) keys.push(k);
  return keys.sort();
};

/** Runs `paddock-runner join` as its own process; resolves with its exit code and output. */
function joinProcess(args: string[]): Promise<{ code: number | null; out: string }> {
  const child = spawn(tsxBin, [join(repoRoot, "services/runner-agent/src/join/main.ts"), "join", ...args], { stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  child.stdout.on("data", (b: Buffer) => (out += b.toString()));
  child.stderr.on("data", (b: Buffer) => (out += b.toString()));
  return new Promise((resolve) => child.once("exit", (code) => resolve({ code, out })));
}

/** The env file the join wrote, as the runner-agent's environment. */
function envOf(file: string): Record<string, string> {
  const env: Record<string, string> = {};
  for (const line of readFileSync(file, "utf8").split("\n")) {
    const m = /^([A-Z_]+)=(.*)$/.exec(line);
    if (m?.[1] && m[2] !== undefined) env[m[1]] = m[2];
  }
  return env;
}

/** `paddock runner join-token` against the stack: the token alone on stdout. */
async function mintWithCli(): Promise<string> {
  const r = await runCli(["runner", "join-token", "--pool", "default", "--ttl-ms", "600000"], { PADDOCK_URL: stack.url, PADDOCK_TOKEN: stack.token });
  expect(r.code, r.stderr).toBe(0);
  return r.stdout.trim();
}

/** Joins a host as `runnerId` (its token minted by the CLI) and starts its runner-agent from the written config. */
async function joinAndStart(runnerId: string, capacity = 8): Promise<{ agent: ServiceProcess; config: string; seed: string }> {
  const config = join(dir, `${runnerId}.env`);
  const joined = await joinProcess(["--gateway", stack.url, "--token", await mintWithCli(), "--runner-id", runnerId, "--config", config]);
  expect(joined.code, joined.out).toBe(0);
  const env = envOf(config);
  const agent = await startService("runner-agent", { ...stack.commonEnv, ...env, PADDOCK_RUNNER_CAPACITY: String(capacity), PADDOCK_RUNNER_DATA_DIR: join(dir, `${runnerId}-data`), PADDOCK_GATEWAY_URL: stack.url });
  started.push(agent);
  agents.set(runnerId, agent);
  return { agent, config, seed: env.PADDOCK_NATS_NKEY_SEED_FILE ?? "" };
}

const connectWithSeed = (seedFile: string, user: string) =>
  connect({ servers: stack.nats.url, authenticator: nkeyAuthenticator(new TextEncoder().encode(readFileSync(seedFile, "utf8").trim())), inboxPrefix: inboxPrefixOf(user), maxReconnectAttempts: 0 });

describe("join tokens and joins", () => {
  it("refuse an unknown, malformed, expired or spent token, a malformed key and a taken id, with typed errors and no change", async () => {
    const publicKey = createUser().getPublicKey();
    const unknown = `pdj_${randomBytes(32).toString("base64url")}`;
    expect(await joinRaw({ joinToken: unknown, publicKey })).toMatchObject({ status: 401, body: { error: { code: "unauthenticated" } } });
    expect(await joinRaw({ joinToken: "not-a-token", publicKey })).toMatchObject({ status: 401, body: { error: { code: "unauthenticated" } } });
    // An expired one: its record says so (the storage admin writes it, no clock to wait on).
    const expired = `pdj_${randomBytes(32).toString("base64url")}`;
    const tokens = await new Kvm(nc).open(Buckets.joinTokens);
    await tokens.put(createHash("sha256").update(expired).digest("hex"), JSON.stringify({ poolId: "default", expiresAt: 1, createdBy: "dev", createdAt: 0 }));
    expect(await joinRaw({ joinToken: expired, publicKey })).toMatchObject({ status: 401, body: { error: { code: "unauthenticated" } } });
    const token = await mint();
    expect(await joinRaw({ joinToken: token, publicKey: "Unot-a-key" })).toMatchObject({ status: 400, body: { error: { code: "invalid" } } });
    // Right shape, wrong checksum.
    const flipped = publicKey.slice(0, -1) + (publicKey.endsWith("A") ? "B" : "A");
    expect(await joinRaw({ joinToken: token, publicKey: flipped })).toMatchObject({ status: 400, body: { error: { code: "invalid" } } });
    expect(await identityKeys()).toEqual([]);
    // The token survived every refusal; spent once, it is refused.
    const ok = await joinRaw({ joinToken: token, publicKey, runnerId: "probe-1" });
    expect(ok).toMatchObject({ status: 201, body: { runnerId: "probe-1", poolId: "default", natsUrls: [stack.nats.url] } });
    expect(await joinRaw({ joinToken: token, publicKey: createUser().getPublicKey() })).toMatchObject({ status: 401, body: { error: { code: "unauthenticated" } } });
    // A taken id (or key) is a conflict, and the token it came with is not spent.
    const again = await mint();
    expect(await joinRaw({ joinToken: again, publicKey: createUser().getPublicKey(), runnerId: "probe-1" })).toMatchObject({ status: 409, body: { error: { code: "conflict" } } });
    expect(await joinRaw({ joinToken: again, publicKey, runnerId: "probe-2" })).toMatchObject({ status: 409, body: { error: { code: "conflict" } } });
    expect((await joinRaw({ joinToken: again, publicKey: createUser().getPublicKey(), runnerId: "probe-2" })).status).toBe(201);
    expect(await identityKeys()).toHaveLength(4);
  });

  it("paddock-runner join exits 1 with the typed refusal of an unknown token and writes no config", async () => {
    const config = join(dir, "refused.env");
    const r = await joinProcess(["--gateway", stack.url, "--token", `pdj_${randomBytes(32).toString("base64url")}`, "--config", config]);
    expect(r.code).toBe(1);
    expect(r.out).toMatch(/unauthenticated: missing or invalid join token/);
    expect(() => statSync(config)).toThrow();
  });

  it("needs a bearer token to mint, and no answer or log carries a join token", async () => {
    expect((await api(stack.url, undefined, "POST", "/v1/runners/join-tokens", { poolId: "default" })).status).toBe(401);
    const token = await mint();
    for (const svc of [stack.gateway, stack.scheduler]) expect(svc.output()).not.toContain(token);
  });
});

describe("a joined runner", () => {
  let a: Awaited<ReturnType<typeof joinAndStart>>;
  let session: Session;

  beforeAll(async () => {
    a = await joinAndStart("joined-1");
  }, 120_000);

  it("keeps its seed 0600 beside a config that holds none, connects through the callout and runs a session", async () => {
    expect(statSync(a.seed).mode & 0o777).toBe(0o600);
    const seed = readFileSync(a.seed, "utf8").trim();
    expect(readFileSync(a.config, "utf8")).not.toContain(seed);
    expect(fromSeed(new TextEncoder().encode(seed)).getPublicKey()).toMatch(/^U/);
    session = sessionOf(await api(stack.url, stack.token, "POST", "/v1/sessions", { spec: { cmd: ["sh", "-c", "echo READY; exec sleep 600"] } }));
    const running = await untilSession(nc, session.id, (s) => s.state === "running");
    expect(running.runnerId).toBe("joined-1");
    const exec = await api(stack.url, stack.token, "POST", `/v1/sessions/${session.id}/exec`, { cmd: ["sh", "-c", "echo joined"] });
    expect(exec).toMatchObject({ status: 200, body: { exitCode: 0, stdout: "joined\n" } });
    for (const svc of [stack.gateway, a.agent]) expect(svc.output()).not.toContain(seed);
  }, 120_000);

  it("refuses an unknown nkey, a password, and no credentials", async () => {
    const stranger = createUser();
    await expect(connect({ servers: stack.nats.url, authenticator: nkeyAuthenticator(stranger.getSeed()), maxReconnectAttempts: 0 })).rejects.toThrow(/authorization/i);
    await expect(connect({ servers: stack.nats.url, user: runnerNatsUser("default", "joined-1"), pass: "guess", maxReconnectAttempts: 0 })).rejects.toThrow(/authorization/i);
    await expect(connect({ servers: stack.nats.url, maxReconnectAttempts: 0 })).rejects.toThrow(/authorization/i);
  });

  it("has exactly its own permissions: another runner's input and leases are refused", async () => {
    const user = runnerNatsUser("default", "joined-1");
    const own = await connectWithSeed(a.seed, user);
    try {
      const other = Subjects.inputOfRunner("default", "joined-2");
      expect(await denied(own, other, () => own.subscribe(other))).toMatch(/permissions violation/i);
      const lease = "$KV.runner-leases.default.joined-2";
      expect(await denied(own, lease, () => own.publish(lease, "x"))).toMatch(/permissions violation/i);
    } finally {
      await own.close();
    }
  });

  it("revoked: its connection is closed, it cannot reconnect, it is lost, and its session resumes on another runner", async () => {
    // A checkpoint to resume from, and a second joined runner to resume on.
    expect((await api(stack.url, stack.token, "POST", `/v1/sessions/${session.id}/snapshot`, {})).status).toBeLessThan(300);
    await untilSession(nc, session.id, (s) => s.checkpoint !== undefined && s.state === "running");
    // One slot: full once the session moves here (the next test needs that).
    const b = await joinAndStart("joined-2", 1);
    const disconnected = a.agent.waitForLog((l) => l.nats === "disconnect");
    const revoked = await runCli(["runner", "revoke", "joined-1", "--json"], { PADDOCK_URL: stack.url, PADDOCK_TOKEN: stack.token });
    expect(revoked.code, revoked.stderr).toBe(0);
    expect(JSON.parse(revoked.stdout)).toMatchObject({ identity: { runnerId: "joined-1", revokedAt: expect.any(Number) }, connectionsClosed: 1 });
    await disconnected;
    await expect(connectWithSeed(a.seed, runnerNatsUser("default", "joined-1"))).rejects.toThrow(/authorization/i);
    const runner = (await api(stack.url, stack.token, "GET", "/v1/runners/joined-1")).body as Runner;
    expect(runner).toMatchObject({ state: "lost", lostReason: expect.stringMatching(/^revoked/) });
    const moved = await untilSession(nc, session.id, (s) => s.state === "running" && s.runnerId === "joined-2");
    expect(moved.runnerId).toBe("joined-2");
    const exec = await api(stack.url, stack.token, "POST", `/v1/sessions/${session.id}/exec`, { cmd: ["sh", "-c", "echo moved"] });
    expect(exec).toMatchObject({ status: 200, body: { stdout: "moved\n" } });
    expect(b.agent.output()).not.toContain("permissions violation");
  }, 180_000);

  it("a runner that joins later is readable by those already connected: its session resumes on one of them", async () => {
    // joined-2 connected before joined-3 joined, so its first credentials did not name joined-3's store.
    const peer = runnerAgentOf("joined-2");
    const reconnects = () => peer.logs.filter((l) => l.nats === "reconnect").length;
    const before = reconnects();
    const refreshed = peer.waitForLog((l) => l.nats === "reconnect" && reconnects() > before);
    await joinAndStart("joined-3");
    await refreshed;
    // joined-2 is full: the new session can only go to joined-3.
    const later = sessionOf(await api(stack.url, stack.token, "POST", "/v1/sessions", { spec: { cmd: ["sh", "-c", "echo late > late.txt; exec sleep 600"] } }));
    expect((await untilSession(nc, later.id, (s) => s.state === "running")).runnerId).toBe("joined-3");
    expect((await api(stack.url, stack.token, "POST", `/v1/sessions/${later.id}/snapshot`, {})).status).toBeLessThan(300);
    await untilSession(nc, later.id, (s) => s.checkpoint !== undefined && s.state === "running");
    // Room on joined-2, then joined-3 goes: the session must be restored from joined-3's store by joined-2.
    expect((await api(stack.url, stack.token, "DELETE", `/v1/sessions/${session.id}`)).status).toBeLessThan(300);
    await untilSession(nc, session.id, (s) => s.state === "destroyed");
    const revoked = await runCli(["runner", "revoke", "joined-3"], { PADDOCK_URL: stack.url, PADDOCK_TOKEN: stack.token });
    expect(revoked.code, revoked.stderr).toBe(0);
    await untilSession(nc, later.id, (s) => s.state === "running" && s.runnerId === "joined-2");
    const exec = await api(stack.url, stack.token, "POST", `/v1/sessions/${later.id}/exec`, { cmd: ["cat", "late.txt"] });
    expect(exec).toMatchObject({ status: 200, body: { exitCode: 0, stdout: "late\n" } });
    expect(runnerAgentOf("joined-2").output()).not.toContain("permissions violation");
  }, 180_000);
});
