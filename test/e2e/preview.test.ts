/**
 * Previews through the real stack (issue 25 items 1, 2 and 6): a session's
 * node app listening on its own loopback only, reached at
 * /v1/sessions/:id/ports/:port/ through two gateway replicas: HTTP both ways
 * (a streamed upload, a large download, server-sent events), a WebSocket
 * echo, private and public ports, undeclared ports, nothing listening, and
 * what of the request and the answer crosses (no bearer token to the app,
 * the page sandboxed, its cookies confined to its preview path).
 */
import { createHash } from "node:crypto";
import { request as httpRequest, type IncomingHttpHeaders } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import WebSocket from "ws";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { seedMember, seedToken } from "@paddock/gateway/auth";
import type { Session } from "@paddock/contracts";
import { previewAppSpec, putPreviewApp, startService, startStack, untilAnswers, type ServiceProcess, type Stack } from "@paddock/testing";
import { api, stackClient, Terminal } from "./helpers.ts";

const MEMBER_TOKEN = "tok_preview_member_0123456789";
let stack: Stack;
let nc: NatsConnection;
let second: ServiceProcess;
let secondUrl: string;
let session: Session;

const { createSession } = stackClient(() => stack);

const auth = (token = stack.token) => ({ authorization: `Bearer ${token}` });
const preview = (port: number, path = "/", base = stack.url) => `${base}/v1/sessions/${session.id}/ports/${port}${path}`;

beforeAll(async () => {
  stack = await startStack();
  nc = await connect({ servers: stack.nats.url });
  await seedToken(nc, MEMBER_TOKEN, { workspaceId: "default", actor: { id: "mia", kind: "user" }, createdAt: 1 });
  await seedMember(nc, { workspaceId: "default", actorId: "mia", role: "member" });
  // The second replica also serves previews by host (PADDOCK_PREVIEW_ORIGIN): `<port>-<session>.preview.test`.
  second = await startService("gateway", { ...stack.commonEnv, PADDOCK_HTTP_PORT: "0", PADDOCK_DEV_TOKEN: stack.token, PADDOCK_PREVIEW_ORIGIN: "http://preview.test" });
  secondUrl = `http://127.0.0.1:${String(second.ready.httpPort)}`;
  session = await createSession({
    spec: {
      apps: [
        previewAppSpec("web", [{ port: 8000 }, { port: 8001, public: true }]),
        { name: "idle", cmd: ["sleep", "3600"], ports: [{ port: 8002 }] },
        { name: "py", cmd: ["python3", "-m", "http.server", "8003", "--bind", "127.0.0.1"], tty: false, ports: [{ port: 8003 }] },
      ],
    },
  });
  await api(stack.url, stack.token, "GET", `/v1/sessions/${session.id}?waitFor=running&timeoutMs=60000`);
  await putPreviewApp(stack.url, stack.token, session.id);
  const term = await Terminal.open(stack.url, stack.token, session.id, "since=all&app=web");
  await term.until((t) => t.output().includes("LISTENING 8000") && t.output().includes("LISTENING 8001"));
  term.ws.close();
});
afterAll(async () => {
  await second?.stop();
  await nc?.drain();
  await stack?.stop();
});

describe("declared ports", () => {
  it("are on the session record with their preview URLs", () => {
    expect(session.ports).toEqual([
      { port: 8000, public: false, app: "web", url: `/v1/sessions/${session.id}/ports/8000/` },
      { port: 8001, public: true, app: "web", url: `/v1/sessions/${session.id}/ports/8001/` },
      { port: 8002, public: false, app: "idle", url: `/v1/sessions/${session.id}/ports/8002/` },
      { port: 8003, public: false, app: "py", url: `/v1/sessions/${session.id}/ports/8003/` },
    ]);
  });

  it("refuse a port declared twice, or on the spec beside apps", async () => {
    for (const spec of [
      { apps: [{ name: "a", cmd: ["true"], ports: [{ port: 80 }] }, { name: "b", cmd: ["true"], ports: [{ port: 80 }] }] },
      { apps: [{ name: "a", cmd: ["true"] }], ports: [{ port: 80 }] },
      { cmd: ["true"], ports: [{ port: 0 }] },
      { cmd: ["true"], ports: [{ port: 70_000 }] },
    ]) {
      const res = await fetch(`${stack.url}/v1/sessions`, { method: "POST", headers: { ...auth(), "content-type": "application/json" }, body: JSON.stringify({ spec }) });
      expect(res.status, JSON.stringify(spec)).toBe(400);
    }
  });
});

/** A request to the second replica naming its preview by Host (fetch will not send another Host). */
function byHost(host: string, path: string, headers: Record<string, string> = {}): Promise<{ status: number; headers: IncomingHttpHeaders; body: string }> {
  const { port } = new URL(secondUrl);
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: "127.0.0.1", port: Number(port), path, headers: { ...headers, host } }, (res) => {
      let body = "";
      res.setEncoding("utf8").on("data", (d: string) => (body += d));
      res.once("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
    });
    req.once("error", reject).end();
  });
}

describe("a preview by host", () => {
  it("gives the app every path (root-relative URLs work) on an origin of its own: no sandbox, its own cookie paths", async () => {
    const host = `8001-${session.id}.preview.test`;
    const seen = await byHost(host, "/headers?x=1");
    expect(seen.status).toBe(200);
    expect(JSON.parse(seen.body)).toMatchObject({ url: "/headers?x=1", port: 8001 });
    expect(seen.headers["content-security-policy"]).toBeUndefined();
    expect(seen.headers["set-cookie"]).toEqual(["sid=1; Path=/; HttpOnly"]);
    // The gateway's own routes are not there: the path is the app's.
    const api = await byHost(host, "/v1/sessions");
    expect(api.body).toBe("hello from port 8001\n");
    expect((await byHost(`nope.preview.test`, "/")).status).toBe(404);
    expect((await byHost(`8009-${session.id}.preview.test`, "/")).status).toBe(404);
  });

  it("needs the token for a private port, or a ticket's cookie set on that host", async () => {
    const host = `8000-${session.id}.preview.test`;
    expect((await byHost(host, "/")).status).toBe(401);
    expect((await byHost(host, "/", auth())).status).toBe(200);
    const ticket = (await (await fetch(`${secondUrl}/v1/sessions/${session.id}/preview-ticket`, { method: "POST", headers: { ...auth(), "content-type": "application/json" }, body: JSON.stringify({ port: 8000 }) })).json()) as { hostUrl?: string };
    const hostUrl = new URL(ticket.hostUrl ?? "");
    expect(hostUrl.host).toBe(host);
    const redeemed = await byHost(host, `${hostUrl.pathname}${hostUrl.search}`);
    expect(redeemed.status).toBe(303);
    expect(redeemed.headers.location).toBe("/");
    const cookie = (redeemed.headers["set-cookie"]?.[0] ?? "").split(";")[0] ?? "";
    expect(redeemed.headers["set-cookie"]?.[0]).toMatch(/; Path=\/; /);
    expect((await byHost(host, "/seen", { cookie })).status).toBe(200);
    // That cookie opens that port only.
    expect((await byHost(`8002-${session.id}.preview.test`, "/", { cookie })).status).toBe(401);
  });

  it("carries a WebSocket", async () => {
    const ws = new WebSocket(`${secondUrl.replace(/^http/, "ws")}/ws`, { headers: { host: `8001-${session.id}.preview.test` } });
    await new Promise<void>((resolve, reject) => ws.once("open", () => resolve()).once("error", reject));
    const echo = new Promise<string>((resolve) => ws.once("message", (data: Buffer) => resolve(data.toString())));
    ws.send("by host");
    expect(await echo).toBe("echo:by host");
    ws.close();
  });
});

describe("a preview", () => {
  it("reaches an app listening on the session's own loopback, through either gateway replica", async () => {
    for (const base of [stack.url, secondUrl]) {
      const res = await fetch(preview(8000, "/", base), { headers: auth() });
      expect(res.status).toBe(200);
      expect(await res.text()).toBe("hello from port 8000\n");
    }
  });

  it("reaches Python's http.server in the session (its workspace listed) through either replica", async () => {
    // Up once it answers (the interpreter may start after the node app).
    for (const base of [stack.url, secondUrl]) expect(await untilAnswers(preview(8003, "/", base), { headers: auth() })).toContain("Directory listing for /");
  });

  it("needs the creator's or an admin's token for a private port, nothing for a public one", async () => {
    expect((await fetch(preview(8000))).status).toBe(401);
    expect((await fetch(preview(8000), { headers: auth("tok_nobody_at_all_0123456789") })).status).toBe(401);
    expect((await fetch(preview(8000), { headers: auth(MEMBER_TOKEN) })).status).toBe(403);
    const open = await fetch(preview(8001));
    expect([open.status, await open.text()]).toEqual([200, "hello from port 8001\n"]);
  });

  it("refuses undeclared ports and unknown sessions alike (404), redirects a bare port to its slash, and says 502 when nothing listens", async () => {
    expect((await fetch(preview(9999), { headers: auth() })).status).toBe(404);
    expect((await fetch(`${stack.url}/v1/sessions/ses_nosuchsession0000/ports/8000/`, { headers: auth() })).status).toBe(404);
    const bare = await fetch(preview(8000, "?a=1"), { headers: auth(), redirect: "manual" });
    expect([bare.status, bare.headers.get("location")]).toEqual([308, `/v1/sessions/${session.id}/ports/8000/?a=1`]);
    const nothing = await fetch(preview(8002), { headers: auth() });
    expect(nothing.status).toBe(502);
    expect(((await nothing.json()) as { error: { code: string } }).error.code).toBe("unavailable");
  });

  it("hands the app no token and itself as localhost; sandboxes its page and confines its cookies to its preview", async () => {
    const res = await fetch(preview(8000, "/headers?x=1"), { headers: { ...auth(), "x-custom": "kept" } });
    const seen = (await res.json()) as { headers: Record<string, string>; url: string };
    expect(seen.url).toBe("/headers?x=1");
    expect(seen.headers.authorization).toBeUndefined();
    expect(seen.headers.host).toBe("localhost:8000");
    expect(seen.headers["x-custom"]).toBe("kept");
    expect(seen.headers["x-forwarded-host"]).toBe(new URL(stack.url).host);
    expect(res.headers.get("content-security-policy")).toMatch(/^sandbox /);
    expect(res.headers.get("set-cookie")).toBe(`sid=1; HttpOnly; Path=/v1/sessions/${session.id}/ports/8000/`);
  });

  it("streams an upload and a download whole, and server-sent events as they come", async () => {
    const body = Buffer.alloc(5 * 1024 * 1024 + 3);
    for (let i = 0; i < body.length; i++) body[i] = (i * 7) & 0xff;
    const echoed = Buffer.from(await (await fetch(preview(8000, "/echo"), { method: "POST", headers: auth(), body })).arrayBuffer());
    expect(echoed.equals(body)).toBe(true);

    const big = await fetch(preview(8000, "/big?mb=24", secondUrl), { headers: auth() });
    const got = Buffer.from(await big.arrayBuffer());
    expect(got.length).toBe(24 * 1024 * 1024);
    const want = createHash("sha256");
    for (let i = 0; i < got.length; i += 65536) want.update(Buffer.from(Array.from({ length: Math.min(65536, got.length - i) }, (_, j) => (i + j) % 251)));
    expect(createHash("sha256").update(got).digest("hex")).toBe(want.digest("hex"));

    const sse = await fetch(preview(8000, "/sse"), { headers: auth() });
    expect(sse.headers.get("content-type")).toBe("text/event-stream");
    expect(await sse.text()).toBe("data: tick 0\n\ndata: tick 1\n\ndata: tick 2\n\n");
  });

  it("opens a private port in a browser: a single-use ticket URL sets a cookie for that port only, which the app never sees", async () => {
    const ask = (body: unknown, token = stack.token) => fetch(`${stack.url}/v1/sessions/${session.id}/preview-ticket`, { method: "POST", headers: { ...auth(token), "content-type": "application/json" }, body: JSON.stringify(body) });
    expect((await ask({ port: 8000 }, MEMBER_TOKEN)).status).toBe(403);
    expect((await ask({ port: 9999 })).status).toBe(404);
    expect((await ask({ port: "x" })).status).toBe(400);
    const issued = await ask({ port: 8000 });
    expect(issued.status).toBe(201);
    const { url, ticket } = (await issued.json()) as { url: string; ticket: string };
    expect(url).toBe(`/v1/sessions/${session.id}/ports/8000/?paddock_preview_ticket=${ticket}`);
    const opened = await fetch(`${stack.url}${url}`, { redirect: "manual" });
    expect([opened.status, opened.headers.get("location")]).toEqual([303, `/v1/sessions/${session.id}/ports/8000/`]);
    const setCookie = opened.headers.get("set-cookie") ?? "";
    expect(setCookie).toMatch(new RegExp(`^paddock_preview=pdp_[A-Za-z0-9_-]{43}; Path=/v1/sessions/${session.id}/ports/8000/; Max-Age=\\d+; HttpOnly; SameSite=Lax$`));
    // Spent: a second use is refused.
    expect((await fetch(`${stack.url}${url}`, { redirect: "manual" })).status).toBe(401);
    const cookie = setCookie.split(";")[0] ?? "";
    const page = await fetch(preview(8000, "/headers"), { headers: { cookie: `theme=dark; ${cookie}` } });
    expect(page.status).toBe(200);
    expect(((await page.json()) as { headers: Record<string, string> }).headers.cookie).toBe("theme=dark");
    // Another port, or a made-up cookie: refused.
    expect((await fetch(preview(8002), { headers: { cookie } })).status).toBe(401);
    expect((await fetch(preview(8000), { headers: { cookie: `paddock_preview=pdp_${"A".repeat(43)}` } })).status).toBe(401);
  });

  it("refuses a preview cookie once the token it stands for is revoked, on a connection kept open to the app", async () => {
    const minted = (await api(stack.url, stack.token, "POST", "/v1/tokens", { label: "preview-revoke" })).body as { token: string; id: string };
    const asked = await fetch(`${stack.url}/v1/sessions/${session.id}/preview-ticket`, { method: "POST", headers: { ...auth(minted.token), "content-type": "application/json" }, body: JSON.stringify({ port: 8000 }) });
    const { url } = (await asked.json()) as { url: string };
    const redeemed = await fetch(`${stack.url}${url}`, { redirect: "manual" });
    const cookie = (redeemed.headers.get("set-cookie") ?? "").split(";")[0] ?? "";
    const withCookie = () => fetch(preview(8000, "/seen"), { headers: { cookie } });
    expect((await withCookie()).status).toBe(200);
    expect((await withCookie()).status).toBe(200);
    expect((await api(stack.url, stack.token, "DELETE", `/v1/tokens/${minted.id}`)).status).toBe(200);
    expect((await withCookie()).status).toBe(401);
  });

  it("keeps its connection to the app between requests; a warm suspend ends it, and the next request wakes the session and is answered", async () => {
    const own = await createSession({ spec: { apps: [previewAppSpec("web", [{ port: 8000, public: true }])] } });
    await api(stack.url, stack.token, "GET", `/v1/sessions/${own.id}?waitFor=running&timeoutMs=60000`);
    await putPreviewApp(stack.url, stack.token, own.id);
    const url = `${stack.url}/v1/sessions/${own.id}/ports/8000/conn`;
    await untilAnswers(url);
    const conn = async () => {
      const res = await fetch(url);
      expect(res.status).toBe(200);
      return res.text();
    };
    const first = await conn();
    expect(await conn()).toBe(first);
    const suspended = await api(stack.url, stack.token, "POST", `/v1/sessions/${own.id}/suspend?wait=suspended_warm&timeoutMs=60000`, { warm: true });
    expect((suspended.body as { state: string }).state).toBe("suspended_warm");
    const woken = await conn();
    expect(woken).not.toBe(first);
    expect(((await api(stack.url, stack.token, "GET", `/v1/sessions/${own.id}`)).body as { state: string }).state).toBe("running");
    await api(stack.url, stack.token, "DELETE", `/v1/sessions/${own.id}`);
  });

  it("goes on the bus through a runner without a data plane: HTTP, a download and a WebSocket", async () => {
    await stack.addRunner({ runnerId: "runner-bus", env: { PADDOCK_RUNNER_DATA_LISTEN: "off", PADDOCK_RUNNER_CAPABILITIES: "previews-on-bus" } });
    const env = await api(stack.url, stack.token, "POST", "/v1/environments", { name: "on-bus", requirements: { capabilities: ["previews-on-bus"] } });
    const own = await createSession({ environmentId: (env.body as { id: string }).id, spec: { apps: [previewAppSpec("web", [{ port: 8000, public: true }])] } });
    const running = (await api(stack.url, stack.token, "GET", `/v1/sessions/${own.id}?waitFor=running&timeoutMs=60000`)).body as Session;
    expect(running.runnerId).toBe("runner-bus");
    await putPreviewApp(stack.url, stack.token, own.id);
    const base = `${stack.url}/v1/sessions/${own.id}/ports/8000`;
    await untilAnswers(`${base}/`);
    const big = Buffer.from(await (await fetch(`${base}/big?mb=3`)).arrayBuffer());
    expect(big.length).toBe(3 * 1024 * 1024);
    expect(big.every((b, i) => b === i % 251)).toBe(true);
    const ws = new WebSocket(`${base.replace(/^http/, "ws")}/ws`);
    await new Promise<void>((resolve, reject) => ws.once("open", () => resolve()).once("error", reject));
    const echo = new Promise<string>((resolve) => ws.once("message", (data: Buffer) => resolve(data.toString())));
    ws.send("over the bus");
    expect(await echo).toBe("echo:over the bus");
    ws.close();
    await api(stack.url, stack.token, "DELETE", `/v1/sessions/${own.id}`);
  });

  it("carries a WebSocket both ways", async () => {
    const ws = new WebSocket(preview(8000, "/ws").replace(/^http/, "ws"), { headers: auth() });
    await new Promise<void>((resolve, reject) => ws.once("open", () => resolve()).once("error", reject));
    const replies: string[] = [];
    const done = new Promise<void>((resolve) =>
      ws.on("message", (data: Buffer) => {
        replies.push(data.toString());
        if (replies.length === 3) resolve();
      }),
    );
    for (const text of ["one", "two", "x".repeat(1000)]) ws.send(text);
    await done;
    expect(replies).toEqual(["echo:one", "echo:two", `echo:${"x".repeat(1000)}`]);
    ws.close();
    // Refused before any upgrade: no token for a private port.
    const refused = new WebSocket(preview(8000, "/ws").replace(/^http/, "ws"));
    const status = await new Promise<number>((resolve) => refused.once("unexpected-response", (_req, res) => resolve(res.statusCode ?? 0)).once("error", () => resolve(-1)));
    expect(status).toBe(401);
  });
});
