import { describe, expect, it } from "vitest";
import { api, expectError, openTerminal, TOKENS, useHarness } from "../testing/testkit.ts";

const ALLOWED = "https://console.example";
const h = useHarness({ config: { allowedOrigins: [ALLOWED] } });

const creates = () => h.scheduler.callsOf("create");
const create = (headers: Record<string, string>) =>
  api(h.url, "POST", "/v1/sessions", { token: TOKENS.alice, body: JSON.stringify({ spec: { cmd: ["true"] } }), headers: { "content-type": "application/json", ...headers } });

describe("same-origin check on state-changing calls", () => {
  it("refuses a create from a foreign origin with 403 forbidden, before anything reaches the scheduler", async () => {
    for (const origin of ["https://evil.example", "null", "http://127.0.0.1.evil.example", `${h.url}.evil`, h.url.replace("http:", "ftp:")]) {
      expectError(await create({ origin }), 403, "forbidden");
    }
    // Refused before authentication and body: no token, or a body past the limit, is still 403.
    expectError(await api(h.url, "POST", "/v1/sessions", { body: "x".repeat(10_000), headers: { origin: "https://evil.example" } }), 403, "forbidden");
    for (const method of ["PUT", "PATCH", "DELETE"]) {
      expectError(await api(h.url, method, "/v1/secrets/X", { token: TOKENS.alice, body: method === "DELETE" ? undefined : "{}", headers: { origin: "https://evil.example" } }), 403, "forbidden");
    }
    const r = await create({ origin: "https://evil.example" });
    expect(r.json.error.message).toBe("origin not allowed");
    expect(creates()).toEqual([]);
  });

  it("lets through the gateway's own origin (by Host), an allowed origin, and no origin", async () => {
    expect((await create({ origin: h.url })).status).toBe(201);
    expect((await create({ origin: h.url.toUpperCase().replace("HTTP:", "http:") })).status).toBe(201);
    expect((await create({ origin: ALLOWED })).status).toBe(201);
    expect((await create({})).status).toBe(201);
    expect(creates()).toHaveLength(4);
  });

  it("leaves reads alone: a GET from a foreign origin is answered as usual", async () => {
    const r = await api(h.url, "GET", "/v1/sessions", { token: TOKENS.alice, headers: { origin: "https://evil.example" } });
    expect(r.status).toBe(200);
    expect((await api(h.url, "GET", "/healthz", { headers: { origin: "https://evil.example" } })).status).toBe(200);
  });
});

describe("the terminal upgrade", () => {
  it("takes the gateway's own origin (the console it serves) and still refuses a foreign one", async () => {
    // An unknown session: past the origin check the answer is 404, before it 403.
    const own = await openTerminal(h.wsUrl, "ses_nosuch", "", TOKENS.alice, { origin: h.url });
    expect(own).toMatchObject({ ok: false, status: 404 });
    expect(await openTerminal(h.wsUrl, "ses_nosuch", "", TOKENS.alice, { origin: "https://evil.example" })).toMatchObject({ ok: false, status: 403 });
  });
});
