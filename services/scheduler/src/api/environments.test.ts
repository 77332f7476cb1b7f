import { createHash } from "node:crypto";
import { describe, expect, it } from "vitest";
import { Kvm } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/transport-node";
import type { Registry } from "prom-client";
import { Api, Environment, NO_REQUIREMENTS, type PortableSpec, type Scope } from "@paddock/contracts";
import { callRpc } from "@paddock/bus";
import { makeEnvironment } from "@paddock/testing";
import { alice, mallory, testSealKey, useHarness, type SchedulerHarness } from "../testing/testkit.ts";
import { envNameKey } from "./environment-names.ts";
import type { EnvironmentStore } from "../state/environment-store.ts";
import { applyEnvSnapshotFact, createEnvironment, decodeEnvCursor, encodeEnvCursor, type EnvSnapshotFact } from "./environments.ts";
import { bootEnvironmentOf, layerSpec, requirementsOf, setupHashOf } from "../state/layering.ts";
import type { Scheduler } from "../scheduler.ts";

let h: SchedulerHarness;
let nc: NatsConnection;
useHarness((started) => {
  h = started;
  nc = started.nc;
});

/** A scheduler replica, which serves the environment rpcs; the test drives its store directly too. */
async function startReplica(): Promise<{ scheduler: Scheduler; envs: EnvironmentStore; registry: Registry }> {
  const scheduler = await h.start();
  return { scheduler, envs: scheduler.context.envs, registry: h.registryOf(scheduler) };
}

const create = (scope: Scope, body: Record<string, unknown>) => callRpc(nc, Api.createEnvironment, { scope, body: body as { name: string } });
const get = async (scope: Scope, environmentId: string) => (await callRpc(nc, Api.getEnvironment, { scope, environmentId })).environment;
const update = async (scope: Scope, environmentId: string, body: Record<string, unknown>) =>
  (await callRpc(nc, Api.updateEnvironment, { scope, environmentId, body })).environment;
const remove = async (scope: Scope, environmentId: string) => (await callRpc(nc, Api.deleteEnvironment, { scope, environmentId })).environment;

function hashOf(image: string, setup: string): string {
  return createHash("sha256").update(`${image}\0${setup}`).digest("hex");
}

/** Every live environment record of a workspace, read from KV itself (not a view). */
async function storedEnvironments(workspaceId: string): Promise<Environment[]> {
  const kv = await new Kvm(nc).open("environments");
  const out: Environment[] = [];
  for await (const key of await kv.keys(`${workspaceId}.*`)) {
    const entry = await kv.get(key);
    if (entry?.operation !== "PUT") continue;
    const env = Environment.parse(entry.json());
    if (env.lastFact.action !== "delete") out.push(env);
  }
  return out;
}

describe("CRUD over the bus", () => {
  it("creates with defaults, gets, updates, deletes, and scopes everything to the workspace", async () => {
    await startReplica();
    const { environment: env } = await create(alice, { name: "node", image: "node:22", setup: "npm ci" });
    expect(env).toMatchObject({
      workspaceId: "ws1",
      name: "node",
      image: "node:22",
      setup: "npm ci",
      setupHash: hashOf("node:22", "npm ci"),
      egressAllow: [],
      secretRefs: [],
      connectors: [],
      requirements: NO_REQUIREMENTS,
      lastFact: { action: "create", actorId: "alice" },
    });
    expect(env.id).toMatch(/^env_/);
    expect(env.snapshot).toBeUndefined();
    expect(await get(alice, env.id)).toEqual(env);

    const updated = await update(alice, env.id, { init: "echo hi" });
    expect(updated).toMatchObject({ init: "echo hi", lastFact: { action: "update" } });
    expect(updated.lastFact.eventId).not.toBe(env.lastFact.eventId);

    // Another workspace: not_found for every verb, and nothing changes.
    await expect(get(mallory, env.id)).rejects.toMatchObject({ code: "not_found" });
    await expect(update(mallory, env.id, { init: "x" })).rejects.toMatchObject({ code: "not_found" });
    await expect(remove(mallory, env.id)).rejects.toMatchObject({ code: "not_found" });
    expect((await callRpc(nc, Api.listEnvironments, { scope: mallory, limit: 10 })).environments).toEqual([]);
    expect(await get(alice, env.id)).toEqual(updated);

    const deleted = await remove(alice, env.id);
    expect(deleted).toMatchObject({ id: env.id, lastFact: { action: "delete", actorId: "alice" } });
    await expect(get(alice, env.id)).rejects.toMatchObject({ code: "not_found" });
    await expect(remove(alice, env.id)).rejects.toMatchObject({ code: "not_found" });
    await expect(update(alice, env.id, { init: "y" })).rejects.toMatchObject({ code: "not_found" });
    // The replica reads its own delete at once.
    expect((await callRpc(nc, Api.listEnvironments, { scope: alice, limit: 10 })).environments).toEqual([]);
    expect(await storedEnvironments("ws1")).toEqual([]);
  });

  it("refuses bad input with a typed error and changes nothing", async () => {
    await startReplica();
    const { environment: env } = await create(alice, { name: "base" });
    // Sent raw: callRpc would refuse to send a request that breaks the contract.
    const raw = async (subject: string, body: unknown) => (await nc.request(subject, new TextEncoder().encode(JSON.stringify(body)))).json();
    const invalid = { ok: false, error: { code: "invalid" } };
    expect(await raw(Api.createEnvironment.subject, { scope: {}, body: {} })).toMatchObject(invalid);
    expect(await raw(Api.createEnvironment.subject, { scope: alice, body: { name: "x", requirements: { gpus: 1 } } })).toMatchObject(invalid);
    expect(await raw(Api.createEnvironment.subject, { scope: alice, body: { name: "x", secretRefs: ["not a name"] } })).toMatchObject(invalid);
    expect(await raw(Api.createEnvironment.subject, { scope: alice, body: { name: "x", image: "" } })).toMatchObject(invalid);
    // The reference grammar (the contract's ImageRef) holds on the scheduler's side of the call too.
    for (const image of ["Paddock/BusyBox", "x@sha256:abc", "reg:99999/x", `${"a/".repeat(200)}b`]) {
      expect(await raw(Api.createEnvironment.subject, { scope: alice, body: { name: "x", image } })).toMatchObject(invalid);
      expect(await raw(Api.updateEnvironment.subject, { scope: alice, environmentId: env.id, body: { image } })).toMatchObject(invalid);
      expect(await raw(Api.createSession.subject, { scope: alice, body: { spec: { image, cmd: ["true"] } } })).toMatchObject(invalid);
    }
    expect(await raw(Api.updateEnvironment.subject, { scope: alice, environmentId: env.id, body: { name: "" } })).toMatchObject(invalid);
    expect(await raw(Api.updateEnvironment.subject, { scope: alice, environmentId: env.id, body: { initTimeoutSec: 0 } })).toMatchObject(invalid);
    expect(await raw(Api.updateEnvironment.subject, { scope: alice, environmentId: "a.b", body: {} })).toMatchObject(invalid);
    // Well-formed but not issued here: a typed error from the handler.
    await expect(callRpc(nc, Api.listEnvironments, { scope: alice, limit: 10, cursor: "garbage" })).rejects.toMatchObject({ code: "invalid" });
    expect(await get(alice, env.id)).toEqual(env);
    expect((await storedEnvironments("ws1")).map((e) => e.name)).toEqual(["base"]);
  });
});

describe("repositories' secrets", () => {
  it("refuses a repository's secretRef that is not one of the environment's secretRefs", async () => {
    await startReplica();
    const { environment: env } = await create(alice, { name: "repos-secret", secretRefs: ["GIT_TOKEN"] });
    const repo = (secretRef: string) => ({ url: "https://example.com/r.git", secretRef });
    const ok = await callRpc(nc, Api.createSession, { scope: alice, body: { environmentId: env.id, spec: { cmd: ["true"] }, repos: [repo("GIT_TOKEN")] } });
    expect(ok.session.spec.repos).toEqual([repo("GIT_TOKEN")]);
    const refused = { code: "invalid", message: "repos[0].secretRef: OTHER is not one of the environment's secretRefs" };
    await expect(callRpc(nc, Api.createSession, { scope: alice, body: { environmentId: env.id, spec: { cmd: ["true"] }, repos: [repo("OTHER")] } })).rejects.toMatchObject(refused);
    // A scratch session has no secrets to give.
    await expect(callRpc(nc, Api.createSession, { scope: alice, body: { spec: { cmd: ["true"], repos: [repo("GIT_TOKEN")] } } })).rejects.toMatchObject({ code: "invalid" });
  });
});

describe("list", () => {
  it("pages in stable (name, id) order, each environment exactly once", async () => {
    await startReplica();
    const names = ["m", "b", "zeta", "a", "k", "B", "c"];
    for (const name of names) await create(alice, { name });
    await create(mallory, { name: "a" });
    const seen: string[] = [];
    let cursor: string | undefined;
    let pages = 0;
    do {
      const page = await callRpc(nc, Api.listEnvironments, { scope: alice, limit: 3, ...(cursor ? { cursor } : {}) });
      expect(page.environments.length).toBeLessThanOrEqual(3);
      seen.push(...page.environments.map((e) => e.name));
      cursor = page.nextCursor;
      pages += 1;
    } while (cursor);
    expect(pages).toBe(3);
    expect(seen).toEqual([...names].sort());
    const all = await callRpc(nc, Api.listEnvironments, { scope: alice, limit: 7 });
    expect(all.environments).toHaveLength(7);
    expect(all.nextCursor).toBeUndefined();
  });

  it("issues cursors that round-trip and always fit the API's bound", () => {
    const longest = "\u{1F600}".repeat(64); // 128 UTF-16 units, 4 UTF-8 bytes per character
    const id = "e".repeat(64);
    const cursor = encodeEnvCursor(longest, id);
    expect(cursor.length).toBeLessThanOrEqual(512);
    expect(decodeEnvCursor(cursor)).toEqual({ name: longest, id });
    expect(decodeEnvCursor(encodeEnvCursor("a.b c", "env_1"))).toEqual({ name: "a.b c", id: "env_1" });
    for (const bad of ["", "AA", "garbage!", `${encodeEnvCursor("ab", "x")}==`, encodeEnvCursor("ab", "x").slice(0, 3)]) {
      expect(() => decodeEnvCursor(bad)).toThrow(/cursor/);
    }
  });
});

describe("update", () => {
  it("follows pointer semantics: absent unchanged, empty clears, requirements merge", async () => {
    await startReplica();
    const { environment: env } = await create(alice, {
      name: "full",
      image: "img:1",
      setup: "make",
      init: "boot",
      initTimeoutSec: 30,
      egressAllow: ["a.example", "b.example"],
      secretRefs: ["TOKEN"],
      connectors: [{ type: "github", raw: { repo: "o/r" } }],
      requirements: { minCpuMillis: 500, capabilities: ["gpu"] },
    });
    expect(env.requirements).toEqual({ ...NO_REQUIREMENTS, minCpuMillis: 500, capabilities: ["gpu"] });

    // An empty patch is a no-op: no new revision, no new fact.
    expect(await update(alice, env.id, {})).toEqual(env);

    const a = await update(alice, env.id, { requirements: { minMemoryBytes: 1024 } });
    expect(a.requirements).toEqual({ capabilities: ["gpu"], minCpuMillis: 500, minMemoryBytes: 1024, minDiskBytes: 0 });
    expect(a).toMatchObject({ image: "img:1", setup: "make", init: "boot", egressAllow: ["a.example", "b.example"], secretRefs: ["TOKEN"] });

    const b = await update(alice, env.id, { egressAllow: [], image: "", init: "" });
    expect(b.egressAllow).toEqual([]);
    expect(b.image).toBeUndefined();
    expect(b.init).toBeUndefined();
    expect(b).toMatchObject({ setup: "make", secretRefs: ["TOKEN"], connectors: env.connectors, initTimeoutSec: 30 });
    expect(b.setupHash).toBe(hashOf("", "make"));

    const c = await update(alice, env.id, { secretRefs: [], connectors: [], requirements: { capabilities: [] } });
    expect(c).toMatchObject({ secretRefs: [], connectors: [], egressAllow: [] });
    expect(c.requirements).toEqual({ capabilities: [], minCpuMillis: 500, minMemoryBytes: 1024, minDiskBytes: 0 });
    expect(await get(alice, env.id)).toEqual(c);
  });

  it("changes setupHash only when image or setup changes", async () => {
    await startReplica();
    const { environment: env } = await create(alice, { name: "h", image: "img", setup: "s1" });
    expect(env.setupHash).toBe(setupHashOf({ image: "img", setup: "s1" }));
    const same = await update(alice, env.id, { init: "i", egressAllow: ["x.example"], name: "h2", setupTimeoutSec: 60 });
    expect(same.setupHash).toBe(env.setupHash);
    const changed = await update(alice, env.id, { setup: "s2" });
    expect(changed.setupHash).toBe(hashOf("img", "s2"));
    const image = await update(alice, env.id, { image: "img2" });
    expect(image.setupHash).toBe(hashOf("img2", "s2"));
    const back = await update(alice, env.id, { image: "img", setup: "s1" });
    expect(back.setupHash).toBe(env.setupHash);
    // Setting a value to what it already is writes nothing.
    expect(await update(alice, env.id, { setup: "s1" })).toEqual(back);
  });

  it("applies concurrent patches to different fields without losing either", async () => {
    const r = await startReplica();
    const { environment: env } = await create(alice, { name: "cas" });
    await Promise.all(
      Array.from({ length: 6 }, (_, i) => callRpc(nc, Api.updateEnvironment, { scope: alice, environmentId: env.id, body: { requirements: { minCpuMillis: i + 1 } } })),
    );
    await Promise.all([update(alice, env.id, { init: "i" }), update(alice, env.id, { setup: "s" })]);
    const final = (await r.envs.find("ws1", env.id))?.value;
    expect(final).toMatchObject({ init: "i", setup: "s" });
  });
});

describe("names", () => {
  it("are unique within a workspace; rename and delete release them", async () => {
    await startReplica();
    const { environment: first } = await create(alice, { name: "dup" });
    await expect(create(alice, { name: "dup" })).rejects.toMatchObject({ code: "conflict" });
    await create(mallory, { name: "dup" }); // another workspace may use it
    const { environment: other } = await create(alice, { name: "other" });

    // A rename onto a taken name is refused and changes nothing.
    await expect(update(alice, other.id, { name: "dup", init: "x" })).rejects.toMatchObject({ code: "conflict" });
    expect(await get(alice, other.id)).toEqual(other);

    // A rename frees the old name.
    await update(alice, first.id, { name: "renamed" });
    const { environment: again } = await create(alice, { name: "dup" });
    await expect(create(alice, { name: "renamed" })).rejects.toMatchObject({ code: "conflict" });

    // A delete frees it too.
    await remove(alice, again.id);
    const { environment: third } = await create(alice, { name: "dup" });
    expect(third.id).not.toBe(again.id);
    expect((await storedEnvironments("ws1")).map((e) => e.name).sort()).toEqual(["dup", "other", "renamed"]);
  });

  it("takes over a name whose holder is gone (a crash left the key behind)", async () => {
    const r = await startReplica();
    await r.scheduler.context.names.put(envNameKey("ws1", "orphan"), "env_gone");
    const { environment } = await create(alice, { name: "orphan" });
    expect(environment.name).toBe("orphan");
  });

  it("yields exactly one environment for concurrent creates of one name on two replicas", async () => {
    const a = await startReplica();
    const b = await startReplica();
    for (let round = 0; round < 8; round++) {
      const name = `race-${round}`;
      const results = await Promise.allSettled([
        createEnvironment(a.scheduler.context, a.envs, alice, { name }),
        createEnvironment(b.scheduler.context, b.envs, alice, { name }),
        createEnvironment(a.scheduler.context, a.envs, alice, { name }),
        createEnvironment(b.scheduler.context, b.envs, alice, { name }),
      ]);
      const won = results.filter((x) => x.status === "fulfilled");
      expect(won).toHaveLength(1);
      for (const lost of results.filter((x) => x.status === "rejected")) expect(lost.reason).toMatchObject({ code: "conflict" });
    }
    const stored = await storedEnvironments("ws1");
    expect(stored.map((e) => e.name).sort()).toEqual(Array.from({ length: 8 }, (_, i) => `race-${i}`));
  });

  it("lets exactly one of two concurrent renames onto one name win", async () => {
    await startReplica();
    await startReplica();
    const { environment: x } = await create(alice, { name: "x" });
    const { environment: y } = await create(alice, { name: "y" });
    const results = await Promise.allSettled([update(alice, x.id, { name: "target" }), update(alice, y.id, { name: "target" })]);
    expect(results.filter((r) => r.status === "fulfilled")).toHaveLength(1);
    const names = (await storedEnvironments("ws1")).map((e) => e.name).sort();
    expect(names.filter((n) => n === "target")).toHaveLength(1);
    expect(names).toHaveLength(2);
  });
});

describe("delete", () => {
  it("is refused while a non-terminal session uses the environment, allowed after", async () => {
    await startReplica();
    const { environment: env } = await create(alice, { name: "used" });
    const { session } = await callRpc(nc, Api.createSession, { scope: alice, body: { environmentId: env.id, spec: { cmd: ["true"] } } });
    expect(session.state).toBe("queued");
    await expect(remove(alice, env.id)).rejects.toMatchObject({ code: "conflict" });
    expect(await get(alice, env.id)).toEqual(env);

    const canceled = await callRpc(nc, Api.deleteSession, { scope: alice, sessionId: session.id });
    expect(canceled.session.state).toBe("canceled");
    expect((await remove(alice, env.id)).id).toBe(env.id);
    await expect(get(alice, env.id)).rejects.toMatchObject({ code: "not_found" });
  });
});

describe("environment snapshots", () => {
  function snapshotFact(env: Environment, setupHash: string, ref: string): EnvSnapshotFact {
    return {
      type: "env_snapshot",
      runnerId: "r1",
      poolId: "default",
      runnerGeneration: 1,
      sessionId: "ses_builder",
      workspaceId: env.workspaceId,
      placementGeneration: 1,
      at: 5,
      environmentId: env.id,
      setupHash,
      checkpoint: { ref: `env-snapshots/${ref}`, format: "tar+gzip", capabilities: ["portable"] },
      sealKey: testSealKey,
    };
  }

  it("records a snapshot for the current setupHash and discards (and counts) a stale one", async () => {
    const r = await startReplica();
    const ctx = r.scheduler.context;
    const { environment: env } = await create(alice, { name: "snap", image: "img", setup: "s1", secretRefs: ["K"] });

    expect(await applyEnvSnapshotFact(ctx, r.envs, snapshotFact(env, env.setupHash, "one"))).toBe("applied");
    const withSnap = await get(alice, env.id);
    expect(withSnap).toMatchObject({ snapshotHash: env.setupHash, snapshot: { ref: "env-snapshots/one" }, lastFact: { action: "snapshot", actorId: "r1" } });
    expect(await applyEnvSnapshotFact(ctx, r.envs, snapshotFact(env, env.setupHash, "one"))).toBe("duplicate");
    expect(bootEnvironmentOf(withSnap, {}).snapshot).toEqual(withSnap.snapshot);

    // setup moves on: the snapshot is kept but no longer valid.
    const moved = await update(alice, env.id, { setup: "s2" });
    expect(moved.snapshot).toEqual(withSnap.snapshot);
    expect(moved.snapshotHash).toBe(env.setupHash);
    expect(moved.setupHash).not.toBe(env.setupHash);
    expect(bootEnvironmentOf(moved, {}).snapshot).toBeUndefined();

    // A snapshot built for the old setup arrives late: discarded, counted.
    expect(await applyEnvSnapshotFact(ctx, r.envs, snapshotFact(env, env.setupHash, "late"))).toBe("stale");
    expect(await get(alice, env.id)).toEqual(moved);
    // One for an environment that is gone: discarded, counted.
    expect(await applyEnvSnapshotFact(ctx, r.envs, snapshotFact({ ...env, id: "env_gone" }, env.setupHash, "gone"))).toBe("stale");
    expect((await r.envs.metrics.staleSnapshots.get()).values[0]?.value).toBe(2);
    expect(await r.registry.getSingleMetricAsString("paddock_stale_env_snapshots_total")).toContain(" 2");

    // The current setup's snapshot lands, and concurrent writers do not lose it.
    const [applied] = await Promise.all([
      applyEnvSnapshotFact(ctx, r.envs, snapshotFact(moved, moved.setupHash, "two")),
      update(alice, env.id, { init: "boot" }),
    ]);
    expect(applied).toBe("applied");
    const final = await get(alice, env.id);
    expect(final).toMatchObject({ init: "boot", snapshotHash: moved.setupHash, snapshot: { ref: "env-snapshots/two" } });
    expect(bootEnvironmentOf(final, {}).snapshot).toEqual(final.snapshot);
  });
});

describe("layering (PortableSpec rules)", () => {
  const env = makeEnvironment({
    id: "env_1",
    workspaceId: "ws1",
    name: "e",
    image: "env-image",
    setup: "make",
    setupHash: setupHashOf({ image: "env-image", setup: "make" }),
    init: "boot",
    initTimeoutSec: 10,
    setupTimeoutSec: 100,
    egressAllow: ["a.example", "b.example"],
    secretRefs: ["TOKEN"],
    connectors: [],
    requirements: { capabilities: ["gpu"], minCpuMillis: 1000, minMemoryBytes: 0, minDiskBytes: 0 },
    snapshot: { ref: "env-snapshots/s", format: "tar+gzip", capabilities: [] },
    snapshotHash: setupHashOf({ image: "env-image", setup: "make" }),
    createdAt: 1,
    updatedAt: 1,
    lastFact: { eventId: "evt_1", action: "create", actorId: "alice", at: 1 },
  });
  const repo = { url: "https://example.com/r.git" };
  const other = { url: "https://example.com/o.git", ref: "main" };

  const cases: { name: string; env: Environment | undefined; spec: PortableSpec; repos?: (typeof repo)[] | undefined; want: PortableSpec }[] = [
    { name: "unset image inherits the environment's", env, spec: {}, want: { image: "env-image", egressAllow: ["a.example", "b.example"] } },
    { name: "set image overrides", env, spec: { image: "mine" }, want: { image: "mine", egressAllow: ["a.example", "b.example"] } },
    { name: "cmd is the session's own", env, spec: { cmd: ["run"] }, want: { image: "env-image", cmd: ["run"], egressAllow: ["a.example", "b.example"] } },
    {
      name: "egress extends the environment's, in order, without duplicates",
      env,
      spec: { egressAllow: ["c.example", "a.example", "d.example", "c.example"] },
      want: { image: "env-image", egressAllow: ["a.example", "b.example", "c.example", "d.example"] },
    },
    { name: "an empty egress list removes nothing", env, spec: { egressAllow: [] }, want: { image: "env-image", egressAllow: ["a.example", "b.example"] } },
    { name: "repos nil keeps the spec's", env, spec: { repos: [repo] }, repos: undefined, want: { image: "env-image", egressAllow: ["a.example", "b.example"], repos: [repo] } },
    { name: "repos [] clones nothing", env, spec: { repos: [repo] }, repos: [], want: { image: "env-image", egressAllow: ["a.example", "b.example"], repos: [] } },
    {
      name: "a repos list clones exactly these, in order",
      env,
      spec: { repos: [repo] },
      repos: [other, repo],
      want: { image: "env-image", egressAllow: ["a.example", "b.example"], repos: [other, repo] },
    },
    { name: "scratch: the spec stands as given", env: undefined, spec: { cmd: ["x"] }, want: { cmd: ["x"] } },
    { name: "scratch: egress deduplicated", env: undefined, spec: { egressAllow: ["x", "x", "y"] }, want: { egressAllow: ["x", "y"] } },
    { name: "scratch: repos [] is none", env: undefined, spec: {}, repos: [], want: { repos: [] } },
    { name: "an environment without image leaves image unset", env: { ...env, image: undefined }, spec: {}, want: { egressAllow: ["a.example", "b.example"] } },
  ];
  it.each(cases)("$name", ({ env: e, spec, repos, want }) => {
    const before = structuredClone(spec);
    expect(layerSpec(e, spec, repos)).toEqual(want);
    expect(spec).toEqual(before); // pure: the input is untouched
  });

  it("refuses a layered egress list longer than a spec may carry", () => {
    const many = (p: string) => Array.from({ length: 200 }, (_, i) => `${p}${i}.example`);
    expect(() => layerSpec({ ...env, egressAllow: many("e") }, { egressAllow: many("s") }, undefined)).toThrow(/egressAllow/);
  });

  it("boots from a snapshot only while it is valid and the image is the environment's", () => {
    expect(bootEnvironmentOf(env, {})).toEqual({
      environmentId: "env_1",
      setup: "make",
      setupHash: env.setupHash,
      setupTimeoutSec: 100,
      init: "boot",
      initTimeoutSec: 10,
      snapshot: env.snapshot,
      secretRefs: ["TOKEN"],
    });
    expect(bootEnvironmentOf(env, { image: "env-image" }).snapshot).toEqual(env.snapshot);
    expect(bootEnvironmentOf(env, layerSpec(env, {}, undefined)).snapshot).toEqual(env.snapshot);
    expect(bootEnvironmentOf(env, { image: "mine" }).snapshot).toBeUndefined();
    expect(bootEnvironmentOf({ ...env, snapshotHash: "old" }, {}).snapshot).toBeUndefined();
    expect(bootEnvironmentOf({ ...env, setup: undefined, init: undefined, snapshot: undefined }, {})).toEqual({
      environmentId: "env_1",
      setupHash: env.setupHash,
      setupTimeoutSec: 100,
      initTimeoutSec: 10,
      secretRefs: ["TOKEN"],
    });
  });

  it("derives requirements from the environment, none for a scratch session", () => {
    expect(requirementsOf(env)).toEqual(env.requirements);
    expect(requirementsOf(undefined)).toEqual(NO_REQUIREMENTS);
    requirementsOf(undefined).capabilities.push("mutated");
    expect(NO_REQUIREMENTS.capabilities).toEqual([]);
  });

  it("requires image:oci of a session whose spec names an image (its own or its environment's), once", () => {
    expect(requirementsOf(undefined, { image: "reg/x:1" }).capabilities).toEqual(["image:oci"]);
    expect(requirementsOf(env, { image: "reg/x:1" }).capabilities).toEqual([...env.requirements.capabilities, "image:oci"]);
    expect(requirementsOf({ ...env, requirements: { ...env.requirements, capabilities: ["image:oci"] } }, { image: "reg/x:1" }).capabilities).toEqual(["image:oci"]);
    expect(requirementsOf(env, {}).capabilities).toEqual(env.requirements.capabilities);
  });
});
