/**
 * Issue 23 item 5 on the bwrap backend: the runner's workspace operations
 * (push, pull, diff, checkpoint) on a real bwrap session give the session no
 * lever over the runner (root). What the runner writes belongs to the
 * session's uid; what the session plants (a symlink or hard link to a host
 * file, a FIFO, a git object store pointing at a host repository, a workspace
 * swapped for a link) never makes it read, write or chown outside.
 */
import { DEFAULT_INIT_PATH } from "../config.ts";
import { execFileSync } from "node:child_process";
import { chmodSync, linkSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import type { ReadableStream as NodeWebReadableStream } from "node:stream/web";
import { gunzipSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Objm, type ObjectStore } from "@nats-io/obj";
import { callRpc, provision } from "@paddock/bus";
import { newSealKey, sealed, sealKeyFrom, unsealed } from "@paddock/archive";
import { CheckpointManifest, ObjectStores, PaddockError, transferObjectName, transferRef, workspaceRpcs, type DispatchCommand, type PortableSpec, type RunnerFact } from "@paddock/contracts";
import { useNatsServer } from "@paddock/testing/vitest";
import { testHostIds } from "../sandbox/bwrap/test-sandbox.ts";
import { DEFAULT_SANDBOX_LIMITS } from "../sandbox/bwrap/limits.ts";
import { parseCheckpointRef } from "../workspace/checkpoint.ts";
import { collectFacts, collectTerm, dispatchTo, fakeScheduler, maliciousTar, tarEntry, testAgent, type TestAgent } from "../testing/test-support.ts";

const nats = useNatsServer();
const WS = "ws1";
const KEY = newSealKey();
const sealKey = KEY.toString("base64");
let t: TestAgent;
let facts: ReturnType<typeof collectFacts>;
let transfers: ObjectStore;
let dataDir: string;
/** A root-only file of the host, beside the sessions (the runner's data dir): what a session must never get. */
let hostSecret: string;
const HOST_SECRET = "host-secret-bytes";
// Not the ranges of the other bwrap test files (testHostIds(pid), pid + 2_501): a uid range, instance and /16 of its own.
const ids = testHostIds(process.pid + 3_701);
let n = 0;

beforeAll(async () => {
  await provision(nats.nc, { replicas: 1 });
  transfers = await new Objm(nats.nc).open(ObjectStores.transfers);
  dataDir = mkdtempSync(join(tmpdir(), "paddock-lever-"));
  chmodSync(dataDir, 0o711);
  hostSecret = join(dataDir, "host-secret");
  writeFileSync(hostSecret, HOST_SECRET, { mode: 0o600 });
  const scheduler = fakeScheduler(nats.nc, 0);
  t = testAgent(nats.nc, { dataDir, capabilities: [], sandbox: { backend: "bwrap", hide: [], shared: [], uidFirst: ids.firstUid, uidCount: 16, netInstance: ids.instance, netPrefix: ids.prefix, limits: DEFAULT_SANDBOX_LIMITS, init: DEFAULT_INIT_PATH } });
  facts = collectFacts(nats.nc, t.config.poolId, t.config.runnerId);
  await t.agent.start();
  scheduler.sub.unsubscribe();
});
afterAll(async () => {
  await t.agent.stop();
});

interface Held {
  sessionId: string;
  workspace: string;
  target: { sessionId: string; workspaceId: string; placementGeneration: number };
  term: ReturnType<typeof collectTerm>;
}

/** Starts a bwrap session running script (which prints "ready." once it has planted what it plants) and waits for that. */
async function session(script: string): Promise<Held> {
  const sessionId = `lever${++n}`;
  const term = collectTerm(nats.nc, sessionId, "main");
  const spec: PortableSpec = { cmd: ["sh", "-c", script] };
  await dispatchTo(nats.nc, t, { type: "start", sessionId, workspaceId: WS, runnerGeneration: t.agent.generation, placementGeneration: 1, spec, mode: "run", trigger: "initial" } as DispatchCommand);
  await term.waitFor(() => term.text().includes("ready."));
  return { sessionId, workspace: join(dataDir, "sessions", sessionId, "workspace"), target: { sessionId, workspaceId: WS, placementGeneration: 1 }, term };
}

const rpcs = () => workspaceRpcs(t.config.poolId, t.config.runnerId);

async function push(h: Held, path: string, data: Buffer) {
  const transferId = `t${++n}`;
  const name = transferObjectName(WS, h.sessionId, transferId);
  await transfers.put({ name }, Readable.toWeb(sealed(Readable.from([data]), KEY, transferRef(name))) as unknown as ReadableStream<Uint8Array>);
  return callRpc(nats.nc, rpcs().push, { ...h.target, path, transferId, sealKey }, { timeoutMs: 20_000 });
}

/** The gzipped tar a pull of path hands the gateway, opened. */
async function pulledBytes(h: Held, path = ""): Promise<Buffer> {
  const transferId = `t${++n}`;
  await callRpc(nats.nc, rpcs().pull, { ...h.target, path, transferId, sealKey }, { timeoutMs: 20_000 });
  const name = transferObjectName(WS, h.sessionId, transferId);
  const got = await transfers.get(name);
  if (!got) throw new Error("pulled archive missing");
  return bytesOf(unsealed(Readable.fromWeb(got.data as NodeWebReadableStream<Uint8Array>), KEY, transferRef(name)));
}

/** Cold-suspends the session; answers its checkpoint's gzipped tar, opened. */
async function checkpointBytes(h: Held): Promise<Buffer> {
  await dispatchTo(nats.nc, t, { type: "suspend", sessionId: h.sessionId, workspaceId: WS, runnerGeneration: t.agent.generation, placementGeneration: 1, requestId: `c${++n}`, warm: false } as DispatchCommand);
  const fact = (await facts.waitFor((f) => f.sessionId === h.sessionId && f.type === "suspended")) as Extract<RunnerFact, { type: "suspended" }>;
  if (!fact.checkpoint || !fact.sealKey) throw new Error("expected a cold checkpoint");
  const { store, name } = parseCheckpointRef(fact.checkpoint.ref);
  const got = await (await new Objm(nats.nc).open(store)).get(name);
  if (!got) throw new Error("checkpoint missing");
  return bytesOf(unsealed(Readable.fromWeb(got.data as NodeWebReadableStream<Uint8Array>), sealKeyFrom(fact.sealKey), fact.checkpoint.ref));
}

async function bytesOf(stream: Readable): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const part of stream) parts.push(part as Buffer);
  return Buffer.concat(parts);
}

/** Each entry of a gzipped tar as `<type char> <path>[ -> <link target>]` (what tar -tv says), sorted; "./" itself left out. */
function listing(gz: Buffer): string[] {
  return execFileSync("tar", ["-tvz"], { input: gz, encoding: "utf8" })
    .split("\n")
    .filter((line) => line !== "")
    .map((line) => {
      const m = /^(\S)\S+\s+\S+\s+\d+\s+\S+\s+\S+\s+(.*)$/.exec(line);
      return m ? `${m[1]} ${m[2]}` : line;
    })
    .filter((e) => e !== "d ./")
    .sort();
}

/** What a pull of the whole workspace hands out, and what a checkpoint holds: both checked for the host's bytes. */
/** A checkpoint manifest's entries as listing() writes a tar's. */
function manifestListing(gz: Buffer): string[] {
  return CheckpointManifest.parse(JSON.parse(gunzipSync(gz).toString("utf8")))
    .entries.map((e) => (e.type === "dir" ? `d ./${e.path}/` : e.type === "symlink" ? `l ./${e.path} -> ${e.target}` : e.type === "link" ? `h ./${e.path} link to ./${e.target}` : `- ./${e.path}`))
    .sort();
}

async function pulledAndCheckpointed(h: Held): Promise<{ pulled: string[]; checkpointed: string[] }> {
  const pulled = await pulledBytes(h);
  const checkpointed = await checkpointBytes(h);
  for (const gz of [pulled, checkpointed]) expect(gunzipSync(gz).includes(HOST_SECRET)).toBe(false);
  return { pulled: listing(pulled), checkpointed: manifestListing(checkpointed) };
}

async function errorOf(p: Promise<unknown>): Promise<PaddockError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  if (!(err instanceof PaddockError)) throw new Error(`expected a PaddockError, got ${String(err)}`);
  return err;
}

describe("workspace operations on a bwrap session", () => {
  it("pushes files (and the directories they need) owned by the session's uid, which the session then edits", async () => {
    const h = await session('echo "uid=$(id -u) ready."; until [ -f pushed/sub/file.txt ]; do sleep 0.05; done; echo edited >> pushed/sub/file.txt && echo "edit=ok."; exec sleep 600');
    const uid = Number(/uid=(\d+) /.exec(h.term.text())?.[1]);
    expect(uid).toBeGreaterThanOrEqual(ids.firstUid);
    await push(h, "pushed", maliciousTar(tarEntry("sub/", { type: "5" }), tarEntry("sub/link", { type: "2", linkname: "file.txt" }), tarEntry("sub/file.txt", { body: "pushed\n" })));
    for (const p of ["pushed", "pushed/sub", "pushed/sub/file.txt", "pushed/sub/link"]) expect([p, lstatSync(join(h.workspace, p)).uid]).toEqual([p, uid]);
    await h.term.waitFor(() => h.term.text().includes("edit=ok."));
    expect(readFileSync(join(h.workspace, "pushed/sub/file.txt"), "utf8")).toBe("pushed\nedited\n");
  });

  it("a symlink the session plants to a host file is pulled and checkpointed as a link, never as the file", async () => {
    const h = await session(`ln -s ${hostSecret} planted && echo mine > own.txt && echo ready.; exec sleep 600`);
    // A pull of the link itself is a pull of a link, not of what it names.
    expect(await errorOf(pulledBytes(h, "planted"))).toMatchObject({ code: "invalid" });
    const both = await pulledAndCheckpointed(h);
    for (const list of [both.pulled, both.checkpointed]) expect(list).toEqual(["- ./own.txt", `l ./planted -> ${hostSecret}`]);
  });

  it("a hard link to a host file another user owns is neither pulled nor checkpointed", async () => {
    const h = await session("echo mine > own.txt && echo ready.; exec sleep 600");
    // protected_hardlinks keeps the session's uid from making this link itself; where it is off, it could.
    linkSync(hostSecret, join(h.workspace, "hard"));
    const both = await pulledAndCheckpointed(h);
    expect(both).toEqual({ pulled: ["- ./own.txt"], checkpointed: ["- ./own.txt"] });
  });

  it("a FIFO the session plants does not hang a pull or a checkpoint, and is left out", async () => {
    const h = await session("mkfifo pipe && echo mine > own.txt && echo ready.; exec sleep 600");
    const both = await pulledAndCheckpointed(h);
    expect(both).toEqual({ pulled: ["- ./own.txt"], checkpointed: ["- ./own.txt"] });
  });

  it("diffs as the session's uid, with the repository's own config never run", async () => {
    // A host repository only root reads, whose commit holds the secret.
    const hostRepo = join(dataDir, "host-repo");
    mkdirSync(hostRepo, { mode: 0o700 });
    const git = (cwd: string, ...args: string[]) => execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@t", ...args], { cwd, encoding: "utf8" }).trim();
    git(hostRepo, "init", "-q");
    writeFileSync(join(hostRepo, "secret.txt"), `${HOST_SECRET}\n`);
    git(hostRepo, "add", ".");
    git(hostRepo, "commit", "-qm", "s");
    const hostCommit = git(hostRepo, "rev-parse", "HEAD");
    const g = "git -c user.name=s -c user.email=s@s";
    const script = [
      // good: an ordinary repository with a change, and a config that would run programs were it read.
      `mkdir good && cd good && ${g} init -q && echo one > a.txt && ${g} add . && ${g} commit -qm one && echo two > a.txt`,
      `${g} config core.fsmonitor "touch $PWD/../fsmonitor-ran" && ${g} config diff.external "touch $PWD/../external-ran" && cd ..`,
      // evil: its objects borrowed from the host repository, its HEAD that repository's commit.
      `mkdir evil && cd evil && ${g} init -q && echo ${hostRepo}/.git/objects > .git/objects/info/alternates && echo ${hostCommit} > .git/HEAD && cd ..`,
      "echo ready.; exec sleep 600",
    ].join(" && ");
    const h = await session(script);
    const reply = await callRpc(nats.nc, rpcs().diff, h.target, { timeoutMs: 30_000 });
    const good = reply.repos.find((r) => r.path === "good");
    expect(good?.diff).toContain("-one\n+two");
    expect(JSON.stringify(reply)).not.toContain(HOST_SECRET);
    expect(readdirSync(h.workspace).sort()).toEqual(["evil", "good"]);
  });

  it("a workspace swapped for a symlink between operations is refused, never followed", async () => {
    const h = await session("echo mine > own.txt && echo ready.; exec sleep 600");
    expect(listing(await pulledBytes(h))).toEqual(["- ./own.txt"]);
    const elsewhere = mkdtempSync(join(dataDir, "elsewhere-"));
    writeFileSync(join(elsewhere, "host.txt"), HOST_SECRET);
    renameSync(h.workspace, `${h.workspace}.real`);
    symlinkSync(elsewhere, h.workspace);
    try {
      expect(await errorOf(pulledBytes(h))).toMatchObject({ code: "not_found" });
      expect(await errorOf(push(h, "", maliciousTar(tarEntry("x.txt", { body: "x" }))))).toMatchObject({ code: "not_found" });
      expect(await errorOf(callRpc(nats.nc, rpcs().diff, h.target, { timeoutMs: 30_000 }))).toMatchObject({ code: "not_found" });
      expect(readdirSync(elsewhere)).toEqual(["host.txt"]);
    } finally {
      // Put back, so that the session's destroy removes its own directory.
      renameSync(h.workspace, `${h.workspace}.link`);
      renameSync(`${h.workspace}.real`, h.workspace);
    }
  });
});
