/**
 * Backup and restore of Paddock's state (issue 29 item 7, docs/operations.md):
 * scripts/backup.ts copies a live stack's buckets and checkpoint stores;
 * scripts/restore.ts writes them into a brand-new nats-server; the services
 * started on it with the same secrets take up the old state — the environment,
 * the member and her token, and a cold-suspended session that resumes from
 * its restored checkpoint with its file (a manifest checkpoint: its chunks
 * come back from the backed-up chunk stream). A corrupt backup, a chunk file
 * publishing outside its stream and a server that is not empty are refused
 * before anything is written; bad flags are usage errors.
 */
import { spawn } from "node:child_process";
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createHash } from "node:crypto";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { Buckets, MANIFEST_FORMAT, ObjectStores, runnerChunkStream, Subjects } from "@paddock/contracts";
import { repoRoot, startNatsServer, startService, startStack, untilSession, type NatsServerHandle, type ServiceProcess, type Stack } from "@paddock/testing";
import type { Manifest } from "../../scripts/backup-format.ts";
import { encodeChunkRecord, readChunkRecords } from "../../scripts/backup-chunks.ts";
import { api } from "./helpers.ts";

/** Runs one of the scripts to its exit. */
function runScript(script: "backup" | "restore", args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ["--import", "tsx", join("scripts", `${script}.ts`), ...args], { cwd: repoRoot, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    child.once("error", reject);
    child.once("exit", (code) => resolve({ code, stdout, stderr }));
  });
}

/** Every stream on the server with its message count: "nothing written" is this staying the same. */
async function streamsOf(url: string): Promise<Record<string, number>> {
  const nc = await connect({ servers: url });
  try {
    const jsm = await jetstreamManager(nc);
    const out: Record<string, number> = {};
    for await (const s of jsm.streams.list()) out[s.config.name] = s.state.messages;
    return out;
  } finally {
    await nc.close();
  }
}

const FILE_TEXT = `kept across a restore ${Math.random().toString(36).slice(2)}`;
let stack: Stack;
let work: string;
let backupDir: string;
let fresh: NatsServerHandle | undefined;
const restarted: ServiceProcess[] = [];
/** The first stack is stopped mid-file (its data dir kept: the secrets); afterAll then only removes the dir. */
let stackStopped = false;
let envId = "";
let sessionId = "";
let anaToken = "";

beforeAll(async () => {
  stack = await startStack({ secretFiles: true });
  work = mkdtempSync(join(tmpdir(), "paddock-backup-"));
  backupDir = join(work, "backup");
  const dev = (method: string, path: string, body?: unknown) => api(stack.url, stack.token, method, path, body);
  const env = await dev("POST", "/v1/environments", { name: "restorable" });
  expect(env.status, JSON.stringify(env.body)).toBe(201);
  envId = (env.body as { id: string }).id;
  expect((await dev("PUT", "/v1/workspaces/default/members/ana", { role: "member" })).status).toBe(200);
  const minted = await dev("POST", "/v1/workspaces/default/members/ana/tokens", { label: "before the restore" });
  expect(minted.status, JSON.stringify(minted.body)).toBe(201);
  anaToken = (minted.body as { token: string }).token;
  const created = await dev("POST", "/v1/sessions", { spec: { cmd: ["sleep", "600"] } });
  expect(created.status, JSON.stringify(created.body)).toBe(201);
  sessionId = (created.body as { id: string }).id;
  const nc = await connect({ servers: stack.nats.url });
  try {
    await untilSession(nc, sessionId, (s) => s.state === "running");
  } finally {
    await nc.close();
  }
  const put = await fetch(`${stack.url}/v1/sessions/${sessionId}/files?path=keep.txt`, { method: "PUT", headers: { authorization: `Bearer ${stack.token}`, "content-type": "application/octet-stream" }, body: FILE_TEXT });
  expect(put.status).toBe(200);
  const cold = await dev("POST", `/v1/sessions/${sessionId}/suspend?wait=suspended_cold&timeoutMs=60000`, { warm: false });
  expect((cold.body as { state: string }).state).toBe("suspended_cold");
}, 180_000);

afterAll(async () => {
  await Promise.all(restarted.map((s) => s.stop()));
  await fresh?.stop();
  if (stackStopped) rmSync(stack.dataDir, { recursive: true, force: true });
  else await stack?.stop();
  if (work !== undefined) rmSync(work, { recursive: true, force: true });
});

describe("backup and restore", () => {
  it("bad flags are usage errors (exit 2) that touch nothing", async () => {
    for (const [script, args] of [
      ["backup", ["--bogus"]],
      ["backup", ["--out", join(work, "x")]],
      ["backup", ["--nats", "nats://127.0.0.1:9", "--out", join(work, "x"), "--creds", "c", "--user", "u", "--password-file", "p"]],
      ["restore", ["--nats", "nats://127.0.0.1:9"]],
      ["restore", ["--nats", "nats://127.0.0.1:9", "--from", work, "--replicas", "9"]],
      ["restore", ["--nats", "nats://127.0.0.1:9", "--from", work, "--force=yes"]],
    ] as const) {
      const r = await runScript(script, [...args]);
      expect([r.code, r.stderr], `${script} ${args.join(" ")}`).toEqual([2, expect.stringContaining("usage:")]);
    }
  });

  it("backs up the live stack: every bucket, checkpoint store and chunk stream, each file's sha256 in the manifest", async () => {
    const r = await runScript("backup", ["--nats", stack.nats.url, "--out", backupDir]);
    expect(r.code, r.stderr).toBe(0);
    const summary = JSON.parse(r.stdout) as { chunkStreams: number; chunks: number };
    expect(summary.chunkStreams).toBeGreaterThanOrEqual(1);
    expect(summary.chunks).toBeGreaterThan(0);
    const manifest = JSON.parse(readFileSync(join(backupDir, "manifest.json"), "utf8")) as Manifest;
    for (const f of manifest.files) expect(createHash("sha256").update(readFileSync(join(backupDir, f.path))).digest("hex"), f.path).toBe(f.sha256);
    const entries = Object.fromEntries(manifest.kv.map((b) => [b.bucket, b.entries]));
    expect(entries[Buckets.environments]).toBeGreaterThanOrEqual(1);
    expect(entries[Buckets.members]).toBeGreaterThanOrEqual(1);
    expect(entries[Buckets.tokens]).toBeGreaterThanOrEqual(1);
    expect(entries[Buckets.sessions]).toBeGreaterThanOrEqual(1);
    expect(entries[Buckets.sealKeys]).toBeGreaterThanOrEqual(1);
    expect(entries).not.toHaveProperty(Buckets.runnerLeases);
    // The cold checkpoint is in the runner's own store.
    const checkpoints = manifest.objectStores.filter((s) => s.store.startsWith(ObjectStores.checkpoints)).flatMap((s) => s.objects);
    expect(checkpoints.length).toBeGreaterThanOrEqual(1);
    // Checkpoints are manifests (the runner's default): without their chunks they could not be restored.
    expect(checkpoints.map((o) => o.description)).toContain(MANIFEST_FORMAT);
    const chunkStreams = manifest.chunkStreams ?? [];
    expect(chunkStreams.map((c) => c.stream)).toContain(runnerChunkStream("default", "runner-1"));
    expect(chunkStreams.reduce((sum, c) => sum + c.chunks, 0)).toBe(summary.chunks);
    for (const c of chunkStreams) expect(manifest.files.map((f) => f.path)).toContain(c.file);
    expect(manifest.objectStores.map((s) => s.store)).not.toContain(ObjectStores.transfers);
  });

  it("a corrupt backup is refused before anything is written", async () => {
    await stack.stop({ keepData: true });
    stackStopped = true;
    fresh = await startNatsServer();
    const corrupt = join(work, "corrupt");
    cpSync(backupDir, corrupt, { recursive: true });
    const manifest = JSON.parse(readFileSync(join(corrupt, "manifest.json"), "utf8")) as Manifest;
    const victim = manifest.objectStores.flatMap((s) => s.objects)[0]!.file;
    const bytes = readFileSync(join(corrupt, victim));
    bytes[0] = (bytes[0] ?? 0) ^ 0xff;
    writeFileSync(join(corrupt, victim), bytes);
    const r = await runScript("restore", ["--nats", fresh.url, "--from", corrupt]);
    expect([r.code, r.stderr]).toEqual([3, expect.stringContaining("backup-corrupt")]);
    expect(await streamsOf(fresh.url)).toEqual({});
  });

  it("a chunk file with a record outside its stream's subjects is refused before anything is written, its digest right or not", async () => {
    const bad = join(work, "foreign-chunk");
    cpSync(backupDir, bad, { recursive: true });
    const manifest = JSON.parse(readFileSync(join(bad, "manifest.json"), "utf8")) as Manifest;
    const victim = (manifest.chunkStreams ?? []).find((c) => c.chunks > 0)!;
    // The first chunk moved to another runner's subjects: a restore must not publish into a stream it is not restoring.
    const parts: Uint8Array[] = [];
    let first = true;
    for await (const rec of readChunkRecords(join(bad, victim.file))) {
      const subject = first ? Subjects.chunk("default", "intruder", rec.subject.slice(rec.subject.lastIndexOf(".") + 1)) : rec.subject;
      first = false;
      parts.push(...encodeChunkRecord(subject, rec.data));
    }
    const bytes = Buffer.concat(parts);
    writeFileSync(join(bad, victim.file), bytes);
    // The manifest vouches for the altered file: only the subject check stands in the way.
    const entry = manifest.files.find((f) => f.path === victim.file)!;
    entry.bytes = bytes.length;
    entry.sha256 = createHash("sha256").update(bytes).digest("hex");
    writeFileSync(join(bad, "manifest.json"), JSON.stringify(manifest));
    const r = await runScript("restore", ["--nats", fresh!.url, "--from", bad]);
    expect([r.code, r.stderr]).toEqual([3, expect.stringContaining("backup-corrupt")]);
    expect(r.stderr).toContain("is not a chunk of");
    expect(await streamsOf(fresh!.url)).toEqual({});
  });

  it("restores into a brand-new server and verifies every key, object and chunk", async () => {
    const r = await runScript("restore", ["--nats", fresh!.url, "--from", backupDir]);
    expect(r.code, r.stderr).toBe(0);
    const restored = JSON.parse(r.stdout) as { verified: boolean; chunks: number };
    expect(restored.verified).toBe(true);
    expect(restored.chunks).toBeGreaterThan(0);
    // The runner's chunk stream is back with every chunk.
    const manifest = JSON.parse(readFileSync(join(backupDir, "manifest.json"), "utf8")) as Manifest;
    const streams = await streamsOf(fresh!.url);
    for (const c of manifest.chunkStreams ?? []) expect(streams[c.stream], c.stream).toBe(c.chunks);
  });

  it("a server that already holds state is refused with nothing written, unless --force", async () => {
    const before = await streamsOf(fresh!.url);
    const refused = await runScript("restore", ["--nats", fresh!.url, "--from", backupDir]);
    expect([refused.code, refused.stderr]).toEqual([3, expect.stringContaining("target-not-empty")]);
    expect(await streamsOf(fresh!.url)).toEqual(before);
    const forced = await runScript("restore", ["--nats", fresh!.url, "--from", backupDir, "--force"]);
    expect(forced.code, forced.stderr).toBe(0);
  });

  it("the services started on the restored server with the same secrets take up the old state", async () => {
    const files = stack.secretFiles!;
    const common = { ...stack.commonEnv, PADDOCK_NATS_URL: fresh!.url };
    const start = async (name: "scheduler" | "event-recorder" | "gateway" | "runner-agent", env: Record<string, string>) => {
      const svc = await startService(name, { ...common, ...env });
      restarted.push(svc);
      return svc;
    };
    await start("scheduler", { PADDOCK_SESSION_TOKEN_SECRET_FILE: files.sessionTokenSecret });
    await start("event-recorder", { PADDOCK_SECRETS_KEY_FILE: files.secretsKey });
    const gateway = await start("gateway", { PADDOCK_HTTP_PORT: "0", PADDOCK_DEV_TOKEN_FILE: files.devToken, PADDOCK_SECRETS_KEY_FILE: files.secretsKey });
    const url = `http://127.0.0.1:${String(gateway.ready.httpPort)}`;
    // A runner with an empty data dir: the session can only come back from the restored checkpoint.
    await start("runner-agent", {
      PADDOCK_GATEWAY_URL: url,
      PADDOCK_RUNNER_ID: "runner-1",
      PADDOCK_POOL_ID: "default",
      PADDOCK_RUNNER_CAPACITY: "8",
      PADDOCK_RUNNER_DATA_DIR: join(work, "runner-after-restore"),
      PADDOCK_SECRETS_KEY_FILE: files.secretsKey,
    });

    const env = await api(url, stack.token, "GET", `/v1/environments/${envId}`);
    expect([env.status, (env.body as { name?: string }).name]).toEqual([200, "restorable"]);
    // Ana's token, minted before the backup, still authenticates her as a member.
    const sessions = await api(url, anaToken, "GET", "/v1/sessions");
    expect(sessions.status, JSON.stringify(sessions.body)).toBe(200);
    const members = await api(url, stack.token, "GET", "/v1/workspaces/default/members");
    expect(JSON.stringify(members.body)).toContain('"ana"');

    // A read wakes the cold session (docs/workspace.md): it resumes from the restored checkpoint, file and all.
    const read = await fetch(`${url}/v1/sessions/${sessionId}/files?path=keep.txt`, { headers: { authorization: `Bearer ${stack.token}` } });
    expect([read.status, await read.text()]).toEqual([200, FILE_TEXT]);
    expect((await api(url, stack.token, "GET", `/v1/sessions/${sessionId}`)).body).toMatchObject({ state: "running" });
  }, 180_000);
});
