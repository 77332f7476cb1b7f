/**
 * Watching a live session's files through the real stack (issue 24 item 3:
 * GET /v1/sessions/:id/files/watch): change frames for writes made through
 * the files route and by an exec, filtered to ?path, for any member; and the
 * refusals that come before the upgrade (unknown session, bad path). On an
 * isolated stack (per-service NATS users), so the watch's subjects are
 * exercised under the real permissions.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { WebSocket } from "ws";
import type { NatsConnection } from "@nats-io/transport-node";
import { seedMember, seedToken } from "@paddock/gateway/auth";
import { FileWatchFrame, watchEventsSubject } from "@paddock/contracts";
import { connectAs, ControlPlaneUsers, runnerUser, startStack, type Stack } from "@paddock/testing";
import { startCli } from "../../cli/src/testing/run-cli.ts";
import { api, stackClient } from "./helpers.ts";
import { denied } from "./nats-denied.ts";

const MEMBER_TOKEN = "tok_watch_member_0123456789ab";
let stack: Stack;
let nc: NatsConnection;
let intruder: NatsConnection;
let sessionId: string;
/** A declared runner with credentials of its own that runs no agent: the tests act as it. */
const INTRUDER = { poolId: "default", runnerId: "intruder" };

const { createSession, outputOf } = stackClient(() => stack);

interface Watching {
  ws: WebSocket;
  frames: FileWatchFrame[];
  /** Resolves once a frame matches. */
  seen(match: (f: FileWatchFrame) => boolean, what: string): Promise<void>;
  closed: Promise<{ code: number; reason: string }>;
}

/** Opens the watch socket; a refused upgrade resolves with its status and body instead. */
function openWatch(query: string, token = stack.token, id = sessionId): Promise<Watching | { status: number; body: string }> {
  const ws = new WebSocket(`${stack.url.replace(/^http/, "ws")}/v1/sessions/${id}/files/watch${query}`, { headers: { authorization: `Bearer ${token}` } });
  const frames: FileWatchFrame[] = [];
  const waiters: Array<() => void> = [];
  ws.on("message", (data: Buffer) => {
    frames.push(FileWatchFrame.parse(JSON.parse(data.toString())));
    for (const w of [...waiters]) w();
  });
  const closed = new Promise<{ code: number; reason: string }>((resolve) => ws.on("close", (code, reason) => resolve({ code, reason: reason.toString() })));
  const seen = (match: (f: FileWatchFrame) => boolean, what: string) =>
    new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no frame ${what} in ${JSON.stringify(frames)}`)), 15_000);
      const check = () => {
        if (!frames.some(match)) return;
        clearTimeout(timer);
        waiters.splice(waiters.indexOf(check), 1);
        resolve();
      };
      waiters.push(check);
      check();
    });
  return new Promise((resolve, reject) => {
    ws.once("open", () => resolve({ ws, frames, seen, closed }));
    ws.once("unexpected-response", (_req, res) => {
      let body = "";
      res.on("data", (c: Buffer) => (body += c.toString()));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
    });
    ws.once("error", reject);
  });
}

function opened(w: Watching | { status: number }): Watching {
  if ("status" in w) throw new Error(`upgrade refused: ${w.status}`);
  return w;
}

const change = (path: string, kind: string) => (f: FileWatchFrame) => f.type === "change" && f.path === path && f.kind === kind;

beforeAll(async () => {
  stack = await startStack({ isolated: { runners: [{ poolId: "default", runnerId: "runner-1" }, INTRUDER] } });
  const users = stack.natsUsers ?? {};
  nc = await connectAs(stack.nats.url, ControlPlaneUsers.provisioner, users[ControlPlaneUsers.provisioner] ?? "");
  intruder = await connectAs(stack.nats.url, runnerUser(INTRUDER.poolId, INTRUDER.runnerId), users[runnerUser(INTRUDER.poolId, INTRUDER.runnerId)] ?? "");
  await seedToken(nc, MEMBER_TOKEN, { workspaceId: "default", actor: { id: "wes", kind: "user" }, createdAt: 1 });
  await seedMember(nc, { workspaceId: "default", actorId: "wes", role: "member" });
  sessionId = (await createSession({ spec: { cmd: ["bash", "-c", "mkdir -p src; echo READY; exec sleep 600"] } })).id;
  await outputOf(sessionId, (t) => t.includes("READY"));
});
afterAll(async () => {
  await nc?.drain();
  await intruder?.close();
  await stack?.stop();
});

describe("GET /v1/sessions/:id/files/watch", () => {
  it("sends a change frame for each write, modification and removal, by the files route or an exec", async () => {
    const w = opened(await openWatch(""));
    const put = await fetch(`${stack.url}/v1/sessions/${sessionId}/files?path=src/a.txt`, { method: "PUT", headers: { authorization: `Bearer ${stack.token}`, "content-type": "application/octet-stream" }, body: "hello" });
    expect(put.status).toBe(200);
    await w.seen(change("src/a.txt", "create"), "create src/a.txt");
    expect((await api(stack.url, stack.token, "POST", `/v1/sessions/${sessionId}/exec`, { cmd: ["sh", "-c", "echo more >> src/a.txt"] })).status).toBe(200);
    await w.seen(change("src/a.txt", "modify"), "modify src/a.txt");
    expect((await api(stack.url, stack.token, "POST", `/v1/sessions/${sessionId}/exec`, { cmd: ["rm", "src/a.txt"] })).status).toBe(200);
    await w.seen(change("src/a.txt", "delete"), "delete src/a.txt");
    w.ws.close();
    expect((await w.closed).code).toBe(1005);
  });

  it("filters to ?path, and lets any member (not only the creator) watch", async () => {
    const w = opened(await openWatch("?path=src", MEMBER_TOKEN));
    expect((await api(stack.url, stack.token, "POST", `/v1/sessions/${sessionId}/exec`, { cmd: ["sh", "-c", "echo x > top.txt; echo y > src/b.txt"] })).status).toBe(200);
    await w.seen(change("src/b.txt", "create"), "create src/b.txt");
    expect(w.frames.filter((f) => f.type === "change" && !f.path.startsWith("src/"))).toEqual([]);
    w.ws.close();
  });

  it("refuses before the upgrade: an unknown session 404, a bad path 400, a missing one 404, no token 401", async () => {
    expect(await openWatch("", stack.token, "nosuchsession")).toMatchObject({ status: 404 });
    for (const path of ["..", "../etc", "/etc", "a%00b"]) expect(await openWatch(`?path=${path}`)).toMatchObject({ status: 400 });
    expect((await api(stack.url, stack.token, "POST", `/v1/sessions/${sessionId}/exec`, { cmd: ["ln", "-s", "/etc", "etclink"] })).status).toBe(200);
    expect(await openWatch("?path=etclink")).toMatchObject({ status: 400 });
    expect(await openWatch("?path=missing")).toMatchObject({ status: 404 });
    expect(await openWatch("", "tok_nobody_0123456789abcdef")).toMatchObject({ status: 401 });
    expect(await openWatch("?token=x")).toMatchObject({ status: 400 });
  });

  it("another runner can neither publish a watch's batches nor read them", async () => {
    const subject = watchEventsSubject("default", "runner-1", "forged");
    expect(await denied(intruder, subject, () => intruder.publish(subject, "{}"))).toMatch(/permissions violation/i);
    expect(await denied(intruder, subject, () => intruder.subscribe(subject))).toMatch(/permissions violation/i);
  });

  it("paddock files watch prints one line per change and ends when the watched directory goes away", async () => {
    const exec = async (cmd: string) => expect((await api(stack.url, stack.token, "POST", `/v1/sessions/${sessionId}/exec`, { cmd: ["sh", "-c", cmd] })).status).toBe(200);
    await exec("mkdir -p cliwatch");
    const run = startCli(["files", "watch", `${sessionId}:cliwatch`], { PADDOCK_URL: stack.url, PADDOCK_TOKEN: stack.token });
    // The socket opens at its own pace: touch until a line shows it is watching.
    for (let i = 0; !run.stdout.text().includes("cliwatch/probe"); i++) {
      if (i > 100) throw new Error(`no line for the probe: ${run.stdout.text()} ${run.stderr.text()}`);
      await exec("echo x >> cliwatch/probe");
      await new Promise((r) => setTimeout(r, 100));
    }
    await exec("rm -r cliwatch");
    expect(await run.code).toBe(0);
    expect(run.stdout.text()).toMatch(/^(create|modify) cliwatch\/probe$/m);
    expect(run.stdout.text()).toMatch(/^delete cliwatch\/probe$/m);
  });

  it("watches a warm-suspended session without waking it, and closes 4000 when the session ends; then 409", async () => {
    expect((await api(stack.url, stack.token, "POST", `/v1/sessions/${sessionId}/suspend`, { warm: true })).status).toBe(200);
    const w = opened(await openWatch(""));
    expect((await api(stack.url, stack.token, "GET", `/v1/sessions/${sessionId}`)).body).toMatchObject({ state: "suspended_warm" });
    expect((await api(stack.url, stack.token, "POST", `/v1/sessions/${sessionId}/resume`)).status).toBe(200);
    expect((await api(stack.url, stack.token, "POST", `/v1/sessions/${sessionId}/exec`, { cmd: ["sh", "-c", "echo z > resumed.txt"] })).status).toBe(200);
    await w.seen(change("resumed.txt", "create"), "create resumed.txt");
    expect((await api(stack.url, stack.token, "DELETE", `/v1/sessions/${sessionId}`)).status).toBe(200);
    expect((await w.closed).code).toBe(4000);
    expect(await openWatch("")).toMatchObject({ status: 409 });
  });
});
