/**
 * A snapshot that outlasts one call (issue 30 item 2): the runner checkpoints
 * a workspace that takes longer than the scheduler's wait, and the API says
 * so honestly (202 with where to wait), never a 5xx for work that succeeds.
 * The scheduler's wait is cut to 1 ms here, so every real snapshot is such a
 * one; the checkpoint itself is the real runner's, into the real store.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { Checkpoint, SnapshotPending } from "@paddock/contracts";
import { seedMember, seedToken } from "@paddock/gateway/auth";
import { startStack, type Stack } from "@paddock/testing";
import { Paddock } from "../../sdk/src/index.ts";
import { runCli } from "../../cli/src/testing/run-cli.ts";
import { api, stackClient } from "./helpers.ts";

const MEMBER_TOKEN = "pdk_snapshot_wait_member_token_0123456789abcdefghijk";

let stack: Stack;
let nc: NatsConnection;
let sessionId: string;

beforeAll(async () => {
  stack = await startStack({ env: { scheduler: { PADDOCK_OPERATION_WAIT_MS: "1" } } });
  nc = await connect({ servers: stack.nats.url });
  await seedToken(nc, MEMBER_TOKEN, { workspaceId: "default", actor: { id: "mia", kind: "user" }, createdAt: 1 });
  await seedMember(nc, { workspaceId: "default", actorId: "mia", role: "member" });
  // A few MB of incompressible bytes: the checkpoint takes well past 1 ms.
  const s = await createSession({ spec: { cmd: ["sh", "-c", "head -c 4000000 /dev/urandom > big.bin && echo READY && exec sleep 600"] } });
  sessionId = s.id;
  await outputOf(sessionId, (t) => t.includes("READY"));
});
afterAll(async () => {
  await nc?.drain();
  await stack?.stop();
});

const { getSession, createSession, outputOf } = stackClient(() => stack);

describe("a snapshot longer than the call", () => {
  it("answers 202 with the request and its Location, which answers the checkpoint once taken; the record keeps it", async () => {
    const res = await fetch(`${stack.url}/v1/sessions/${sessionId}/snapshot`, { method: "POST", headers: { authorization: `Bearer ${stack.token}` } });
    expect(res.status).toBe(202);
    const pending = SnapshotPending.parse(await res.json());
    expect(pending).toMatchObject({ sessionId, status: "pending" });
    expect(res.headers.get("location")).toBe(`/v1/sessions/${sessionId}/snapshots/${pending.requestId}`);

    const waited = await api(stack.url, stack.token, "GET", `${res.headers.get("location") ?? ""}?timeoutMs=60000`);
    expect(waited.status).toBe(200);
    const checkpoint = Checkpoint.parse(waited.body);
    expect(checkpoint.ref.endsWith(pending.requestId)).toBe(true);
    // Asked again (a retry, another client): the same answer, at once.
    expect((await api(stack.url, stack.token, "GET", `/v1/sessions/${sessionId}/snapshots/${pending.requestId}`)).body).toEqual(checkpoint);
    expect((await getSession(sessionId)).snapshot).toMatchObject({ requestId: pending.requestId, checkpoint });
    // Any member (who may read the session) may wait on it; only its creator or an admin may start one.
    expect((await api(stack.url, MEMBER_TOKEN, "GET", `/v1/sessions/${sessionId}/snapshots/${pending.requestId}`)).body).toEqual(checkpoint);
    expect((await api(stack.url, MEMBER_TOKEN, "POST", `/v1/sessions/${sessionId}/snapshot`)).status).toBe(403);
  });

  it("the SDK and the CLI wait past the 202 and answer the checkpoint", async () => {
    const pd = new Paddock({ baseUrl: stack.url, token: stack.token });
    const fromSdk = await pd.sessions.snapshot(sessionId);
    expect(fromSdk.ref).toMatch(new RegExp(`/${sessionId}/`));
    const cli = await runCli(["snapshot", sessionId, "--json"], { PADDOCK_URL: stack.url, PADDOCK_TOKEN: stack.token });
    expect(cli.code).toBe(0);
    const fromCli = Checkpoint.parse(JSON.parse(cli.stdout));
    expect(fromCli.ref).not.toBe(fromSdk.ref);
    expect((await getSession(sessionId)).snapshot?.checkpoint).toEqual(fromCli);
  });

  it("refuses a request id it never gave (404), a malformed one or a bad wait (400), and changes nothing", async () => {
    const before = await getSession(sessionId);
    expect((await api(stack.url, stack.token, "GET", `/v1/sessions/${sessionId}/snapshots/req_never_given`)).status).toBe(404);
    expect((await api(stack.url, stack.token, "GET", `/v1/sessions/${sessionId}/snapshots/${"x".repeat(300)}`)).status).toBe(400);
    expect((await api(stack.url, stack.token, "GET", `/v1/sessions/${sessionId}/snapshots/req_1?timeoutMs=-1`)).status).toBe(400);
    expect((await api(stack.url, stack.token, "GET", `/v1/sessions/${sessionId}/snapshots/req_1?wait=running`)).status).toBe(400);
    expect((await api(stack.url, stack.token, "GET", `/v1/sessions/ses_nope/snapshots/req_1`)).status).toBe(404);
    expect((await api(stack.url, undefined, "GET", `/v1/sessions/${sessionId}/snapshots/req_1`)).status).toBe(401);
    expect((await getSession(sessionId)).snapshot).toEqual(before.snapshot);
  });
});

