/**
 * Reading files and listing directories of a live session through the real
 * stack (issue 24 item 3: GET /v1/sessions/:id/files and /files/list), on the
 * runner's default backend: raw bytes byte-identical, exact sizes, types and
 * modes, and the traversal rules of push and pull — nothing outside the
 * workspace, no symlink followed, no FIFO opened, no file of another user.
 */
import { createHash } from "node:crypto";
import { linkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { seedMember, seedToken } from "@paddock/gateway/auth";
import type { FileList } from "@paddock/contracts";
import { startStack, type Stack } from "@paddock/testing";
import { api, stackClient } from "./helpers.ts";

const MEMBER_TOKEN = "tok_files_member_0123456789ab";
let stack: Stack;
let nc: NatsConnection;
let sessionId: string;
let binSha = "";

const { createSession, outputOf } = stackClient(() => stack);

/** GET …/files?path= as raw bytes. */
async function readFile(path: string, token = stack.token): Promise<{ status: number; bytes: Buffer; type: string | null; length: string | null }> {
  const res = await fetch(`${stack.url}/v1/sessions/${sessionId}/files?path=${encodeURIComponent(path)}`, { headers: { authorization: `Bearer ${token}` } });
  return { status: res.status, bytes: Buffer.from(await res.arrayBuffer()), type: res.headers.get("content-type"), length: res.headers.get("content-length") };
}

const list = (query: string) => api(stack.url, stack.token, "GET", `/v1/sessions/${sessionId}/files/list${query}`);

beforeAll(async () => {
  stack = await startStack();
  nc = await connect({ servers: stack.nats.url });
  await seedToken(nc, MEMBER_TOKEN, { workspaceId: "default", actor: { id: "mia", kind: "user" }, createdAt: 1 });
  await seedMember(nc, { workspaceId: "default", actorId: "mia", role: "member" });
  const script = [
    "set -e",
    "mkdir -p src/deep; printf hello > src/a.txt; chmod 600 src/a.txt; : > empty",
    "head -c 300000 /dev/urandom > bin.dat; echo \"sha:$(sha256sum bin.dat | cut -d' ' -f1).\"",
    "ln -s /etc/passwd link; ln -s src dirlink; mkfifo fifo",
    "echo READY",
    "exec sleep 600",
  ].join("\n");
  sessionId = (await createSession({ spec: { cmd: ["bash", "-c", script] } })).id;
  const out = await outputOf(sessionId, (t) => t.includes("READY"));
  binSha = /sha:([0-9a-f]{64})\./.exec(out)?.[1] ?? "";
});
afterAll(async () => {
  await nc?.drain();
  await stack?.stop();
});

describe("GET /v1/sessions/:id/files", () => {
  it("answers a file's raw bytes with its exact length, an empty file as empty, to any member", async () => {
    const a = await readFile("src/a.txt");
    expect(a).toMatchObject({ status: 200, type: "application/octet-stream", length: "5" });
    expect(a.bytes.toString()).toBe("hello");
    const bin = await readFile("bin.dat");
    expect(bin.bytes.length).toBe(300_000);
    expect(createHash("sha256").update(bin.bytes).digest("hex")).toBe(binSha);
    expect(await readFile("./empty")).toMatchObject({ status: 200, length: "0" });
    expect((await readFile("src/a.txt", MEMBER_TOKEN)).status).toBe(200);
  });

  it("refuses what is not a file of the session's in its workspace: 404 missing, 400 otherwise, and never blocks on a FIFO", async () => {
    const refused: Array<[string, number]> = [
      ["nope.txt", 404],
      ["src/nope/x", 404],
      ["src", 400],
      ["link", 400],
      ["dirlink/a.txt", 400],
      ["fifo", 400],
      ["../etc/passwd", 400],
      ["/etc/passwd", 400],
      ["", 400],
      [".", 400],
      ["src\0a.txt", 400],
      ["src\\a.txt", 400],
    ];
    for (const [path, status] of refused) expect([path, (await readFile(path)).status]).toEqual([path, status]);
    // A hard link to a root-only file planted from the host (the session could not make one): not the session's file.
    const secret = join(stack.dataDir, "secret.txt");
    writeFileSync(secret, "root only", { mode: 0o600 });
    linkSync(secret, join(stack.dataDir, "runner-1", "sessions", sessionId, "workspace", "planted"));
    expect((await readFile("planted")).status).toBe(404);
    expect(((await list("")).body as FileList).entries.map((e) => e.path)).not.toContain("planted");
  });
});

describe("GET /v1/sessions/:id/files/list", () => {
  it("lists a directory with types, exact sizes and modes, symlinks as links, no FIFO; depth goes deeper", async () => {
    const top = (await list("")).body as FileList;
    expect(top.truncated).toBe(false);
    expect(top.entries.map((e) => [e.path, e.type])).toEqual([
      ["bin.dat", "file"],
      ["dirlink", "symlink"],
      ["empty", "file"],
      ["link", "symlink"],
      ["src", "dir"],
    ]);
    expect(top.entries.find((e) => e.path === "bin.dat")).toMatchObject({ size: 300_000 });
    expect(top.entries.find((e) => e.path === "link")).toMatchObject({ size: "/etc/passwd".length });
    const deep = (await list("?path=src&depth=2")).body as FileList;
    expect(deep.entries.map((e) => e.path)).toEqual(["src/a.txt", "src/deep"]);
    expect(deep.entries[0]).toMatchObject({ type: "file", size: 5, mode: 0o600 });
    expect(((await list("?depth=2")).body as FileList).entries.map((e) => e.path)).toContain("src/a.txt");
  });

  it("refuses a bad listing (400) and a missing directory (404)", async () => {
    for (const q of ["?path=src/a.txt", "?path=dirlink", "?path=../x", "?depth=0", "?depth=65", "?depth=x", "?depth=1&depth=2", "?bogus=1"]) expect([q, (await list(q)).status]).toEqual([q, 400]);
    expect((await list("?path=nope")).status).toBe(404);
  });

  it("answers 409 once the session has no live sandbox", async () => {
    expect((await api(stack.url, stack.token, "DELETE", `/v1/sessions/${sessionId}`)).status).toBe(200);
    expect((await list("")).status).toBe(409);
    expect((await readFile("src/a.txt")).status).toBe(409);
  });
});
