/**
 * Workspace transfer through the real stack (four services as processes, real
 * PTYs, real object store, the CLI in-process): cp up and down, diff of a repo
 * the session made, a push reloading a watch session, and malicious uploads.
 */
import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { gzipSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Kvm } from "@nats-io/kv";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { packDirectory } from "@paddock/archive";
import type { Session } from "@paddock/contracts";
import { seedMember, seedToken } from "@paddock/gateway/auth";
import { startStack, untilSession, type Stack } from "@paddock/testing";
import { runCli } from "../../cli/src/testing/run-cli.ts";
import { api, sessionOf, stackClient } from "./helpers.ts";

const MEMBER_TOKEN = "tok_workspace_member_0123456789";
const MAX_UPLOAD = 256 * 1024;
let stack: Stack;
let nc: NatsConnection;
let scratch: string;
let cli: Record<string, string>;

beforeAll(async () => {
  stack = await startStack({
    env: {
      gateway: { PADDOCK_MAX_UPLOAD_BYTES: String(MAX_UPLOAD) },
      "runner-agent": { PADDOCK_RUNNER_WORKSPACE_MAX_ENTRIES: "500", PADDOCK_RUNNER_WORKSPACE_MAX_BYTES: String(1024 * 1024), PADDOCK_RUNNER_WATCH_DEBOUNCE_MS: "50" },
    },
  });
  nc = await connect({ servers: stack.nats.url });
  await seedToken(nc, MEMBER_TOKEN, { workspaceId: "default", actor: { id: "mia", kind: "user" }, createdAt: 1 });
  await seedMember(nc, { workspaceId: "default", actorId: "mia", role: "member" });
  scratch = mkdtempSync(join(tmpdir(), "paddock-e2e-ws-"));
  cli = { PADDOCK_URL: stack.url, PADDOCK_TOKEN: stack.token };
});
afterAll(async () => {
  await nc?.drain();
  await stack?.stop();
  rmSync(scratch, { recursive: true, force: true });
});

async function createSession(body: Record<string, unknown>): Promise<Session> {
  const res = await api(stack.url, stack.token, "POST", "/v1/sessions", body);
  expect(res.status).toBe(201);
  return sessionOf(res);
}

/** Resolves with the first revision of the session's record matching pred (a KV watch, no polling). */
function untilRecord(id: string, pred: (s: Session) => boolean): Promise<Session> {
  return untilSession(nc, id, pred);
}

const { outputOf } = stackClient(() => stack);

function sessionDir(s: Session): string {
  return join(stack.dataDir, s.runnerId ?? "", "sessions", s.id);
}

/** Every regular file under dir, relative path → bytes. */
function files(dir: string): Record<string, string> {
  const out: Record<string, string> = {};
  const walk = (d: string) => {
    for (const name of readdirSync(d)) {
      const p = join(d, name);
      if (statSync(p).isDirectory()) walk(p);
      else out[relative(dir, p)] = readFileSync(p).toString("base64");
    }
  };
  walk(dir);
  return out;
}

/** One hand-written ustar entry, so the test controls every field a real tool would sanitize. */
function tarEntry(name: string, opts: { type?: string; body?: string; linkname?: string } = {}): Buffer {
  const body = Buffer.from(opts.body ?? "");
  const h = Buffer.alloc(512, 0);
  const octal = (n: number, len: number) => n.toString(8).padStart(len - 1, "0") + "\0";
  h.write(name, 0, 100);
  h.write(octal(0o644, 8), 100);
  h.write(octal(0, 8), 108);
  h.write(octal(0, 8), 116);
  h.write(octal(body.length, 12), 124);
  h.write(octal(0, 12), 136);
  h.write("        ", 148);
  h.write(opts.type ?? "0", 156);
  h.write(opts.linkname ?? "", 157, 100);
  h.write("ustar\0", 257);
  h.write("00", 263);
  let sum = 0;
  for (const b of h) sum += b;
  h.write(sum.toString(8).padStart(6, "0") + "\0 ", 148);
  const padded = Buffer.alloc(Math.ceil(body.length / 512) * 512, 0);
  body.copy(padded);
  return Buffer.concat([h, padded]);
}

const tarGz = (...entries: Buffer[]) => gzipSync(Buffer.concat([...entries, Buffer.alloc(1024, 0)]));

async function put(id: string, path: string, body: Buffer, token = stack.token) {
  const res = await fetch(`${stack.url}/v1/sessions/${id}/workspace?path=${encodeURIComponent(path)}`, {
    method: "PUT",
    headers: { authorization: `Bearer ${token}`, "content-type": "application/gzip" },
    body,
  });
  return { status: res.status, body: (await res.json()) as { error?: { code: string; message: string } } };
}

describe("paddock cp", () => {
  it("a directory copied up is seen by the session's process and copied down byte-identical", async () => {
    // Waits for the file's content, not for a sentinel file: entries are packed in name order
    // ("done" before "hello.txt"), so a sentinel could be seen before the file it stands for is written.
    const s = await createSession({ spec: { cmd: ["sh", "-c", "echo READY; until grep -q laptop up/hello.txt 2>/dev/null; do sleep 0.05; done; echo \"saw:$(cat up/hello.txt)\"; exec sleep 600"] } });
    await outputOf(s.id, (t) => t.includes("READY"));
    const src = join(scratch, "src");
    mkdirSync(join(src, "nested", "deeper"), { recursive: true });
    writeFileSync(join(src, "hello.txt"), "hello from the laptop");
    writeFileSync(join(src, "nested", "deeper", "blob.bin"), randomBytes(100_000));
    writeFileSync(join(src, "done"), "");
    const up = await runCli(["cp", src, `${s.id}:up`], cli);
    expect(up).toMatchObject({ code: 0, stderr: "" });
    await outputOf(s.id, (t) => t.includes("saw:hello from the laptop"));

    const dst = join(scratch, "dst");
    const down = await runCli(["cp", `${s.id}:up`, dst], cli);
    expect(down).toMatchObject({ code: 0, stderr: "" });
    expect(files(dst)).toEqual(files(src));
    // Each transfer is a committed fact: one push and one pull event so far (the member's pull below is another).
    const kv = await new Kvm(nc).open("sessions");
    const history = await kv.history({ key: `default.${s.id}` });
    const actions: string[] = [];
    for await (const e of history) if (e.operation === "PUT") actions.push(e.json<Session>().lastFact.action);
    expect(actions.filter((a) => a === "push")).toHaveLength(1);
    expect(actions.filter((a) => a === "pull")).toHaveLength(1);

    // A viewer-only member may read but not write; a session without a sandbox is a conflict.
    expect((await fetch(`${stack.url}/v1/sessions/${s.id}/workspace?path=up`, { headers: { authorization: `Bearer ${MEMBER_TOKEN}` } })).status).toBe(200);
    expect(await put(s.id, "", tarGz(tarEntry("x.txt", { body: "x" })), MEMBER_TOKEN)).toMatchObject({ status: 403, body: { error: { code: "forbidden" } } });
    await api(stack.url, stack.token, "DELETE", `/v1/sessions/${s.id}`);
    expect(await put(s.id, "", tarGz(tarEntry("x.txt", { body: "x" })))).toMatchObject({ status: 409, body: { error: { code: "conflict" } } });
  });
});

describe("paddock diff", () => {
  it("shows an edit in a repository the session created", async () => {
    const git = "git -c user.email=t@example.com -c user.name=t";
    const script = `set -e; git init -q repo; cd repo; printf 'one\\n' > f.txt; git add f.txt; ${git} commit -q -m init; printf 'two\\n' >> f.txt; echo READY; exec sleep 600`;
    const s = await createSession({ spec: { cmd: ["sh", "-c", script] } });
    await outputOf(s.id, (t) => t.includes("READY"));
    const r = await runCli(["diff", s.id], cli);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^# repo repo\n/);
    expect(r.stdout).toContain("+two");
    const viaApi = await api(stack.url, MEMBER_TOKEN, "GET", `/v1/sessions/${s.id}/diff`);
    expect(viaApi.status).toBe(200);
    expect(viaApi.body).toMatchObject({ repos: [{ path: "repo", truncated: false }], truncated: false });
  });
});

describe("watch sessions", () => {
  it("a push restarts the app (run.started with trigger watch in the record's apps)", async () => {
    const s = await createSession({ mode: "watch", spec: { cmd: ["sh", "-c", "echo gen:$(cat msg.txt 2>/dev/null); exec sleep 600"] } });
    await untilRecord(s.id, (r) => r.state === "running" && r.apps?.main?.phase === "running");
    const src = join(scratch, "watch");
    mkdirSync(src);
    writeFileSync(join(src, "msg.txt"), "second");
    const chunks: Buffer[] = [];
    for await (const c of packDirectory(src)) chunks.push(Buffer.from(c));
    const pushed = await put(s.id, "", Buffer.concat(chunks));
    expect(pushed).toMatchObject({ status: 200, body: { reload: true } });
    const reloaded = await untilRecord(s.id, (r) => (r.apps?.main?.generation ?? 0) >= 2);
    expect(reloaded.apps?.main).toMatchObject({ trigger: "watch" });
    await outputOf(s.id, (t) => t.includes("gen:second"));
  });
});

describe("malicious uploads", () => {
  it("are refused (400/413) and nothing is written outside the workspace", async () => {
    const s = await createSession({ spec: { cmd: ["sh", "-c", "ln -s / escape; echo READY; exec sleep 600"] } });
    await outputOf(s.id, (t) => t.includes("READY"));
    const placed = await untilRecord(s.id, (r) => r.state === "running");
    const dir = sessionDir(placed);
    const sessionsRoot = join(dir, "..");
    // Sandboxes of ended sessions are renamed aside (.discarded-*) and removed in the background, and the warm pool
    // starts sandboxes ahead (.warm-<n>) whenever it refills: neither is this test's state.
    const sessionsNow = () => readdirSync(sessionsRoot).filter((name) => !name.startsWith(".discarded-") && !/^\.warm-\d+$/.test(name)).sort();
    const before = { session: readdirSync(dir).sort(), sessions: sessionsNow() };
    const bad: Array<[string, Buffer, string, number]> = [
      ["traversal", tarGz(tarEntry("../evil.txt", { body: "pwned" })), "", 400],
      ["deep traversal", tarGz(tarEntry("a/../../../evil.txt", { body: "pwned" })), "", 400],
      ["absolute path", tarGz(tarEntry("/tmp/paddock-e2e-evil.txt", { body: "pwned" })), "", 400],
      ["escaping symlink", tarGz(tarEntry("out", { type: "2", linkname: "../../.." }), tarEntry("out/evil.txt", { body: "pwned" })), "", 400],
      ["escaping hard link", tarGz(tarEntry("hard", { type: "1", linkname: "../../evil.txt" })), "", 400],
      ["device file", tarGz(tarEntry("dev", { type: "3" })), "", 400],
      ["a path through the sandbox's own symlink", tarGz(tarEntry("evil.txt", { body: "pwned" })), "escape/tmp", 400],
      ["too many entries", tarGz(...Array.from({ length: 600 }, (_, i) => tarEntry(`f${i}`, { body: "x" }))), "many", 413],
      ["a decompression bomb", gzipSync(Buffer.concat([tarEntry("bomb", { body: "x" }), Buffer.alloc(32 * 1024 * 1024, 0)]), { level: 9 }), "", 413],
      ["more than the gateway accepts", randomBytes(MAX_UPLOAD + 1), "", 413],
    ];
    for (const [label, body, path, status] of bad) {
      const r = await put(s.id, path, body);
      expect(r.status, label).toBe(status);
      expect(r.body.error?.code, label).toBe(status === 400 ? "invalid" : "too_large");
    }
    for (const path of ["../x", "/etc", "a/../../x"]) expect((await put(s.id, path, tarGz(tarEntry("x", { body: "x" })))).status, path).toBe(400);
    expect(readdirSync(dir).sort()).toEqual(before.session);
    // Nothing new beside the session (earlier tests' sessions may finish their teardown meanwhile).
    expect(sessionsNow().filter((name) => !before.sessions.includes(name))).toEqual([]);
    expect(existsSync("/tmp/paddock-e2e-evil.txt")).toBe(false);
    expect(existsSync("/tmp/evil.txt")).toBe(false);
    expect(existsSync(join(stack.dataDir, "evil.txt"))).toBe(false);
    expect(existsSync(join(dir, "workspace", "many", "f599"))).toBe(false);
  });
});
