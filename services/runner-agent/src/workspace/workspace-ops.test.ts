import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import type { ReadableStream as NodeWebReadableStream } from "node:stream/web";
import { gunzipSync, gzipSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Objm, type ObjectStore } from "@nats-io/obj";
import { callRpc, provision } from "@paddock/bus";
import { ObjectStores, PaddockError, transferObjectName, transferRef, workspaceRpcs, type DispatchCommand, type PortableSpec, type RunnerFact } from "@paddock/contracts";
import { extractArchive, newSealKey, packDirectory, sealed, unsealed } from "@paddock/archive";
import { useNatsServer } from "@paddock/testing/vitest";
import type { AgentConfig } from "../agent.ts";
import { collectFacts, collectTerm, dispatchTo, fakeScheduler, maliciousTar, tarEntry, testAgent, type TestAgent } from "../testing/test-support.ts";

const nats = useNatsServer();
let transfers: ObjectStore;
const agents: TestAgent[] = [];

beforeAll(async () => {
  await provision(nats.nc, { replicas: 1 });
  transfers = await new Objm(nats.nc).open(ObjectStores.transfers);
});
// Before the server stops: after-all hooks run last-registered first.
afterAll(async () => {
  for (const t of agents) await t.agent.stop();
});

let n = 0;
const WS = "ws1";

interface Held {
  t: TestAgent;
  facts: ReturnType<typeof collectFacts>;
  sessionId: string;
  workspace: string;
  rpcs: ReturnType<typeof workspaceRpcs>;
  target: { sessionId: string; workspaceId: string; placementGeneration: number };
}

async function agent(overrides: Partial<AgentConfig> = {}): Promise<{ t: TestAgent; facts: ReturnType<typeof collectFacts> }> {
  const scheduler = fakeScheduler(nats.nc, 0);
  const t = testAgent(nats.nc, overrides);
  agents.push(t);
  const facts = collectFacts(nats.nc, t.config.poolId, t.config.runnerId);
  await t.agent.start();
  scheduler.sub.unsubscribe();
  return { t, facts };
}

/** Starts a session on a fresh agent and waits until it reports running. */
async function session(spec: PortableSpec, mode: "run" | "watch" = "run", overrides: Partial<AgentConfig> = {}): Promise<Held> {
  const { t, facts } = await agent(overrides);
  const sessionId = `w${++n}`;
  const cmd = { type: "start", sessionId, workspaceId: WS, runnerGeneration: t.agent.generation, placementGeneration: 1, spec, mode, trigger: "initial" };
  await dispatchTo(nats.nc, t, cmd as DispatchCommand);
  await facts.waitFor((f) => f.sessionId === sessionId && f.type === "running");
  return {
    t,
    facts,
    sessionId,
    workspace: join(t.config.dataDir, "sessions", sessionId, "workspace"),
    rpcs: workspaceRpcs(t.config.poolId, t.config.runnerId),
    target: { sessionId, workspaceId: WS, placementGeneration: 1 },
  };
}

/** The transfer key of every request here (the gateway makes one per transfer). */
const KEY = newSealKey();
const sealKey = KEY.toString("base64");

/** Stores data as the gateway does: sealed under `key` for its transfer object. */
async function upload(sessionId: string, data: ReadableStream<Uint8Array> | Buffer, key = KEY): Promise<string> {
  const transferId = `t${++n}`;
  const name = transferObjectName(WS, sessionId, transferId);
  const plain = Buffer.isBuffer(data) ? Readable.from([data]) : Readable.fromWeb(data as NodeWebReadableStream<Uint8Array>);
  await transfers.put({ name }, Readable.toWeb(sealed(plain, key, transferRef(name))) as unknown as ReadableStream<Uint8Array>);
  return transferId;
}

async function push(h: Held, path: string, data: ReadableStream<Uint8Array> | Buffer) {
  const transferId = await upload(h.sessionId, data);
  return callRpc(nats.nc, h.rpcs.push, { ...h.target, path, transferId, sealKey }, { timeoutMs: 10_000 });
}

/** A pulled archive, opened as the gateway does. */
async function pulledArchive(sessionId: string, transferId: string): Promise<Readable> {
  const name = transferObjectName(WS, sessionId, transferId);
  const got = await transfers.get(name);
  if (!got) throw new Error(`transfer ${name} missing`);
  return unsealed(Readable.fromWeb(got.data as NodeWebReadableStream<Uint8Array>), KEY, transferRef(name));
}

async function errorOf(p: Promise<unknown>): Promise<PaddockError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  if (!(err instanceof PaddockError)) throw new Error(`expected a PaddockError, got ${String(err)}`);
  return err;
}

const idle = { cmd: ["sleep", "1000"] };

describe("workspace push and pull", () => {
  it("round-trips a directory through the transfers store, byte for byte", async () => {
    const h = await session(idle);
    const src = mkdtempSync(join(tmpdir(), "paddock-src-"));
    mkdirSync(join(src, "nested", "deep"), { recursive: true });
    const blob = randomBytes(300_000);
    writeFileSync(join(src, "nested", "deep", "blob.bin"), blob);
    writeFileSync(join(src, "hello.txt"), "hello\n");
    symlinkSync("hello.txt", join(src, "link"));
    const reply = await push(h, "in/here", packDirectory(src));
    expect(reply).toMatchObject({ reload: false });
    expect(reply.bytes).toBeGreaterThanOrEqual(blob.length);
    expect(readFileSync(join(h.workspace, "in", "here", "nested", "deep", "blob.bin")).equals(blob)).toBe(true);

    const transferId = `t${++n}`;
    const pulled = await callRpc(nats.nc, h.rpcs.pull, { ...h.target, path: "in/here", transferId, sealKey });
    // The stored object is sealed: not a gzip stream; opened, it is the archive of the size the reply gives.
    const raw = await transfers.getBlob(transferObjectName(WS, h.sessionId, transferId));
    expect([raw?.[0], raw?.[1]]).not.toEqual([0x1f, 0x8b]);
    const opened = Buffer.concat(await (await pulledArchive(h.sessionId, transferId)).toArray());
    expect(opened.length).toBe(pulled.size);
    const dst = mkdtempSync(join(tmpdir(), "paddock-dst-"));
    await extractArchive(Readable.from([opened]), dst);
    expect(readFileSync(join(dst, "nested", "deep", "blob.bin")).equals(blob)).toBe(true);
    expect(readFileSync(join(dst, "link"), "utf8")).toBe("hello\n");

    // One file comes back under its own name.
    const one = `t${++n}`;
    await callRpc(nats.nc, h.rpcs.pull, { ...h.target, path: "in/here/hello.txt", transferId: one, sealKey });
    const dst2 = mkdtempSync(join(tmpdir(), "paddock-dst-"));
    await extractArchive(await pulledArchive(h.sessionId, one), dst2);
    expect(readdirSync(dst2)).toEqual(["hello.txt"]);
  });

  it("refuses a placement generation it does not hold, a missing path and a path through a symlink", async () => {
    const h = await session(idle);
    const archive = maliciousTar(tarEntry("a.txt", { body: "a" }));
    const stale = await errorOf(callRpc(nats.nc, h.rpcs.push, { ...h.target, placementGeneration: 2, path: "", transferId: await upload(h.sessionId, archive), sealKey }));
    expect(stale.code).toBe("conflict");
    expect((await errorOf(callRpc(nats.nc, h.rpcs.pull, { ...h.target, path: "nope", transferId: "x1", sealKey }))).code).toBe("not_found");
    // The sandbox can make links: a push "into" one must not follow it.
    const outside = mkdtempSync(join(tmpdir(), "paddock-outside-"));
    symlinkSync(outside, join(h.workspace, "escape"));
    expect((await errorOf(push(h, "escape", archive))).code).toBe("invalid");
    expect((await errorOf(push(h, "escape/sub", archive))).code).toBe("invalid");
    expect((await errorOf(callRpc(nats.nc, h.rpcs.pull, { ...h.target, path: "escape", transferId: "x2", sealKey }))).code).toBe("invalid");
    expect(readdirSync(outside)).toEqual([]);
    // The runner's schema refuses .. and absolute paths before anything runs (sent raw: the client helper would refuse to send them).
    for (const path of ["../x", "a/../../x", "/etc"]) {
      const reply = await nats.nc.request(h.rpcs.push.subject, JSON.stringify({ ...h.target, path, transferId: "x3", sealKey }));
      expect(reply.json()).toMatchObject({ ok: false, error: { code: "invalid" } });
    }
    // Neither without a transfer key, nor with one that is not 32 bytes.
    for (const key of [undefined, "c2hvcnQ="]) {
      const reply = await nats.nc.request(h.rpcs.push.subject, JSON.stringify({ ...h.target, path: "", transferId: await upload(h.sessionId, archive), sealKey: key }));
      expect(reply.json()).toMatchObject({ ok: false, error: { code: "invalid" } });
    }
  });

  it("refuses a transfer object that does not open with the request's key, writing nothing", async () => {
    const h = await session(idle);
    const archive = maliciousTar(tarEntry("planted.txt", { body: "planted" }));
    // Sealed under another key: an object someone else put (or replaced) in the shared store.
    const transferId = await upload(h.sessionId, archive, newSealKey());
    const err = await errorOf(callRpc(nats.nc, h.rpcs.push, { ...h.target, path: "", transferId, sealKey }, { timeoutMs: 10_000 }));
    expect(err).toMatchObject({ code: "invalid", message: "archive does not open with its transfer key" });
    // Plain gzip bytes where a sealed object belongs.
    const plain = `t${++n}`;
    await transfers.putBlob({ name: transferObjectName(WS, h.sessionId, plain) }, archive);
    expect((await errorOf(callRpc(nats.nc, h.rpcs.push, { ...h.target, path: "", transferId: plain, sealKey }, { timeoutMs: 10_000 }))).code).toBe("invalid");
    expect(existsSync(join(h.workspace, "planted.txt"))).toBe(false);
  });
});

describe("a sandbox racing the transfers", () => {
  it("swapping a directory under the target for a link to a directory outside never gets a push written there nor a pull to read from there", async () => {
    const outside = mkdtempSync(join(tmpdir(), "paddock-outside-"));
    // Named as the sandbox's own file, so a path looked up again after a swap lands on it.
    writeFileSync(join(outside, "mine.txt"), "SECRET-OUTSIDE");
    // The sandbox's own app is the attacker: `in/sub` flips between a real directory and a link outside (two renames each way), bounded in count.
    const racer = [
      `const fs = require("node:fs");`,
      `fs.mkdirSync("in", { recursive: true }); process.chdir("in");`,
      `let j = 0;`,
      `const aside = (p) => { try { fs.renameSync(p, "junk" + j++); } catch {} };`,
      `const dir = () => { try { if (fs.lstatSync("d").isDirectory()) return; aside("d"); } catch {} fs.mkdirSync("d"); fs.writeFileSync("d/mine.txt", "mine"); };`,
      `const link = () => { try { if (fs.lstatSync("l").isSymbolicLink()) return; aside("l"); } catch {} fs.symlinkSync(${JSON.stringify(outside)}, "l"); };`,
      `for (let i = 0; i < 2e6 && !(i % 1000 === 0 && fs.existsSync("stop")); i++) {`,
      // Whatever the runner made at "in/sub" goes aside; then "sub" is briefly the directory, then briefly the link.
      `  dir(); link(); aside("sub");`,
      `  try { fs.renameSync("d", "sub"); fs.renameSync("sub", "d"); } catch {}`,
      `  try { fs.renameSync("l", "sub"); fs.renameSync("sub", "l"); } catch {}`,
      `}`,
    ].join("\n");
    const h = await session({ cmd: [process.execPath, "-e", racer] });
    const archive = maliciousTar(tarEntry("sub/pushed.txt", { body: "pushed" }), tarEntry("sub/deep/pushed.txt", { body: "pushed" }));
    let pulled = 0;
    for (let i = 0; i < 60; i++) {
      // Refusals (the path is a link, gone, or went away mid-way) are expected; escapes are not.
      await push(h, "in", archive).catch((err: unknown) => expect(err).toBeInstanceOf(PaddockError));
      expect(readdirSync(outside)).toEqual(["mine.txt"]);
      const transferId = `t${++n}`;
      const ok = await callRpc(nats.nc, h.rpcs.pull, { ...h.target, path: "in", transferId, sealKey }).then(
        () => true,
        (err: unknown) => (expect(err).toBeInstanceOf(PaddockError), false),
      );
      if (!ok) continue;
      pulled += 1;
      const bytes = Buffer.concat(await (await pulledArchive(h.sessionId, transferId)).toArray());
      expect(gunzipSync(bytes).includes("SECRET-OUTSIDE")).toBe(false);
    }
    writeFileSync(join(h.workspace, "stop"), "");
    expect(pulled).toBeGreaterThan(0);
    expect(readdirSync(outside)).toEqual(["mine.txt"]);
  });
});

describe("malicious archives", () => {
  const limits = { maxEntries: 20, maxBytes: 64 * 1024, diffMaxRepoBytes: 1024, diffMaxBytes: 4096, diffMaxRepos: 4 };
  const bomb = (() => {
    // A 64 MiB run of zeros: a tar reader sees the end of the archive and would
    // otherwise go on inflating; it compresses to about 64 KiB.
    const header = tarEntry("bomb.txt", { body: "x" });
    return gzipSync(Buffer.concat([header, Buffer.alloc(64 * 1024 * 1024, 0)]), { level: 9 });
  })();
  const many = maliciousTar(...Array.from({ length: 25 }, (_, i) => tarEntry(`f${i}.txt`, { body: "x" })));
  const big = maliciousTar(tarEntry("big.bin", { body: "y".repeat(100 * 1024) }));
  const cases: Array<[string, Buffer, string]> = [
    ["a ../ path", maliciousTar(tarEntry("ok.txt", { body: "ok" }), tarEntry("../evil.txt", { body: "pwned" })), "invalid"],
    ["an absolute path", maliciousTar(tarEntry("/tmp/paddock-ws-evil-abs.txt", { body: "pwned" })), "invalid"],
    ["an escaping symlink", maliciousTar(tarEntry("esc", { type: "2", linkname: "../../.." }), tarEntry("esc/evil.txt", { body: "pwned" })), "invalid"],
    ["an escaping hard link", maliciousTar(tarEntry("hard", { type: "1", linkname: "../evil.txt" })), "invalid"],
    ["a device", maliciousTar(tarEntry("null", { type: "3" })), "invalid"],
    ["a FIFO", maliciousTar(tarEntry("fifo", { type: "6" })), "invalid"],
    ["too many entries", many, "too_large"],
    ["too many bytes", big, "too_large"],
    ["a decompression bomb", bomb, "too_large"],
    ["bytes that are not an archive", Buffer.from("not a tar at all"), "invalid"],
  ];

  for (const [label, archive, code] of cases) {
    it(`refuses ${label} (${code}) and writes nothing outside the workspace`, async () => {
      const h = await session(idle, "run", { workspace: limits });
      const sessionDir = join(h.workspace, "..");
      const before = readdirSync(sessionDir).sort();
      const err = await errorOf(push(h, "target", archive));
      expect(err.code).toBe(code);
      expect(readdirSync(sessionDir).sort()).toEqual(before);
      expect(existsSync(join(h.workspace, "evil.txt"))).toBe(false);
      expect(existsSync(join(sessionDir, "evil.txt"))).toBe(false);
      expect(existsSync("/tmp/paddock-ws-evil-abs.txt")).toBe(false);
      expect(existsSync(join(h.workspace, "target", "f24.txt"))).toBe(false);
    });
  }
});

describe("workspace diff", () => {
  it("answers git diff HEAD of each repository in the sandbox, bounded", async () => {
    const git = "git -c user.email=t@example.com -c user.name=t";
    const script = [
      "set -e",
      "git init -q app && cd app && printf 'one\\n' > f.txt && git add f.txt",
      `${git} commit -q -m init && printf 'two\\n' >> f.txt && cd ..`,
      "git init -q empty",
      "git init -q big && cd big && : > g.txt && git add g.txt",
      `${git} commit -q -m init && seq 1 5000 > g.txt && cd ..`,
      "echo READY; exec sleep 1000",
    ].join("\n");
    const h = await session({ cmd: ["sh", "-c", script] }, "run", {
      workspace: { maxEntries: 10, maxBytes: 10, diffMaxRepoBytes: 2048, diffMaxBytes: 64 * 1024, diffMaxRepos: 8 },
    });
    const term = collectTerm(nats.nc, h.sessionId, "main");
    await term.waitFor(() => term.text().includes("READY"));
    const reply = await callRpc(nats.nc, h.rpcs.diff, h.target);
    const byPath = Object.fromEntries(reply.repos.map((r) => [r.path, r]));
    expect(Object.keys(byPath).sort()).toEqual(["app", "big", "empty"]);
    expect(byPath.app?.diff).toContain("+two");
    expect(byPath.app?.truncated).toBe(false);
    expect(byPath.empty).toMatchObject({ diff: "", error: expect.stringMatching(/no commit/) });
    expect(byPath.big?.truncated).toBe(true);
    expect(Buffer.byteLength(JSON.stringify(byPath.big?.diff))).toBeLessThanOrEqual(2048);
    expect(reply.truncated).toBe(false);
  });
});

describe("watch sessions", () => {
  it("a push reloads the apps (run.started with trigger watch)", async () => {
    const h = await session({ cmd: ["sh", "-c", "cat main.txt 2>/dev/null; exec sleep 1000"] }, "watch");
    const reply = await push(h, "", maliciousTar(tarEntry("main.txt", { body: "v2" })));
    expect(reply.reload).toBe(true);
    const started = await h.facts.waitFor(
      (f: RunnerFact) => f.sessionId === h.sessionId && f.type === "app" && f.run.generation === 2 && f.run.phase === "running",
    );
    expect(started).toMatchObject({ run: { trigger: "watch" } });
  });
});
