/**
 * Tokens, attach tickets, the Origin allowlist and the create rate limit
 * through the real stack (four services as processes): mint a token over the
 * API, use it, revoke it, and see both the next request and an open terminal
 * fail at once.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import WebSocket from "ws";
import { CLOSE_REVOKED, type Session } from "@paddock/contracts";
import { startStack, type Stack } from "@paddock/testing";
import { runCli } from "../../cli/src/testing/run-cli.ts";
import { api, sessionOf, Terminal } from "./helpers.ts";

const ORIGIN = "https://console.example";
let stack: Stack;

beforeAll(async () => {
  stack = await startStack({ env: { gateway: { PADDOCK_ALLOWED_ORIGINS: ORIGIN, PADDOCK_CREATES_PER_MINUTE: "1000" } } });
});
afterAll(async () => {
  await stack?.stop();
});

async function createSession(token: string): Promise<Session> {
  const res = await api(stack.url, token, "POST", "/v1/sessions", { spec: { cmd: ["sh", "-c", "echo ready; exec sleep 600"] } });
  expect(res.status).toBe(201);
  return sessionOf(res);
}

/** Opens the terminal with a ticket and/or headers; resolves with the open socket or the refusal status. */
function openRaw(sessionId: string, query: string, headers: Record<string, string> = {}): Promise<{ ws: WebSocket } | { status: number }> {
  const ws = new WebSocket(`${stack.url.replace(/^http/, "ws")}/v1/sessions/${sessionId}/terminal?${query}`, { headers });
  return new Promise((resolve, reject) => {
    ws.once("open", () => resolve({ ws }));
    ws.once("unexpected-response", (_req, res) => {
      res.resume();
      resolve({ status: res.statusCode ?? 0 });
    });
    ws.once("error", reject);
  });
}

describe("tokens through the stack", () => {
  it("create via API → use → revoke: the next request is 401 and an open terminal is closed with 4003", async () => {
    const created = await api(stack.url, stack.token, "POST", "/v1/tokens", { label: "e2e" });
    expect(created.status).toBe(201);
    const { token, id } = created.body as { token: string; id: string };
    expect(token).toMatch(/^pdk_/);
    const s = await createSession(token);
    const term = await Terminal.open(stack.url, token, s.id, "since=all");
    await term.until((t) => t.output().includes("ready"));
    const listed = await api(stack.url, token, "GET", "/v1/tokens");
    expect(JSON.stringify(listed.body)).not.toContain(token);
    expect((listed.body as { tokens: Array<{ id: string }> }).tokens.map((t) => t.id)).toContain(id);

    const revoked = await runCli(["token", "revoke", id], { PADDOCK_URL: stack.url, PADDOCK_TOKEN: stack.token });
    expect(revoked).toMatchObject({ code: 0, stdout: `${id}\n` });
    expect(await term.closed).toBe(CLOSE_REVOKED);
    expect(term.textFrames().at(-1)).toEqual({ type: "error", code: "unauthenticated", message: "token revoked" });
    expect((await api(stack.url, token, "GET", `/v1/sessions/${s.id}`)).status).toBe(401);
    await api(stack.url, stack.token, "DELETE", `/v1/sessions/${s.id}`);
  });

  it("the CLI mints and lists tokens", async () => {
    const env = { PADDOCK_URL: stack.url, PADDOCK_TOKEN: stack.token };
    const r = await runCli(["token", "create", "--label", "cli", "--expires", "1h"], env);
    expect(r.code).toBe(0);
    const token = r.stdout.trim();
    expect((await api(stack.url, token, "GET", "/v1/sessions")).status).toBe(200);
    const ls = await runCli(["token", "ls"], env);
    expect(ls.stdout).toMatch(/\bcli\b/);
    expect(ls.stdout).not.toContain(token);
  });
});

describe("attach tickets and Origin through the stack", () => {
  it("a ticket opens the terminal once, from an allowed Origin; a foreign Origin is 403; ?token= is 400", async () => {
    const s = await createSession(stack.token);
    const mint = async () => {
      const r = await api(stack.url, stack.token, "POST", `/v1/sessions/${s.id}/attach-ticket`, { mode: "viewer" });
      expect(r.status).toBe(201);
      return (r.body as { ticket: string }).ticket;
    };
    const ticket = await mint();
    expect(await openRaw(s.id, `ticket=${ticket}`, { origin: "https://evil.example" })).toEqual({ status: 403 });
    // the refused Origin did not spend the ticket
    const ok = await openRaw(s.id, `ticket=${ticket}`, { origin: ORIGIN });
    expect("ws" in ok).toBe(true);
    const again = await openRaw(s.id, `ticket=${ticket}`, { origin: ORIGIN });
    expect(again).toEqual({ status: 401 });
    if ("ws" in ok) ok.ws.close();
    expect(await openRaw(s.id, `token=${stack.token}`)).toEqual({ status: 400 });
    // a non-browser client (no Origin) with the header is unaffected
    const term = await Terminal.open(stack.url, stack.token, s.id, "since=all");
    await term.until((t) => t.output().includes("ready"));
    term.ws.close();
    await api(stack.url, stack.token, "DELETE", `/v1/sessions/${s.id}`);
  });
});

describe("create rate limit through the stack", () => {
  let limited: Stack;
  beforeAll(async () => {
    limited = await startStack({ env: { gateway: { PADDOCK_CREATES_PER_MINUTE: "2" } } });
  });
  afterAll(async () => {
    await limited?.stop();
  });

  it("the third create in a minute is 429 rate_limited with Retry-After", async () => {
    const body = { spec: { cmd: ["sleep", "600"] } };
    expect((await api(limited.url, limited.token, "POST", "/v1/sessions", body)).status).toBe(201);
    expect((await api(limited.url, limited.token, "POST", "/v1/sessions", body)).status).toBe(201);
    const res = await fetch(`${limited.url}/v1/sessions`, {
      method: "POST",
      headers: { authorization: `Bearer ${limited.token}`, "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    expect(res.status).toBe(429);
    const retryAfter = Number(res.headers.get("retry-after"));
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(60);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe("rate_limited");
  });
});
