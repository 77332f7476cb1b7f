/**
 * The webhooks routes against a real NATS (KV `webhooks`, `webhook-deliveries`):
 * admins only, the secret answered once and sealed at rest, bad input and
 * private targets refused with nothing stored, another workspace's webhook
 * not found. Delivery itself is the event recorder's (test/e2e/webhooks.test.ts).
 */
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Kvm, type KV } from "@nats-io/kv";
import { SecretBox } from "@paddock/bus";
import { Buckets, MAX_WEBHOOKS_PER_WORKSPACE, webhookKey, WebhookRecord, type CreatedWebhook, type WebhookInfo } from "@paddock/contracts";
import { api, startHarness, TOKENS, WS1, type Harness } from "../testing/testkit.ts";

const KEY = randomBytes(32);
let h: Harness;
let kv: KV;

beforeAll(async () => {
  h = await startHarness({ config: { secretsKey: KEY } });
  kv = await new Kvm(h.nc).open(Buckets.webhooks);
});
afterAll(async () => {
  await h.stop();
});

const json = (v: unknown) => ({ body: JSON.stringify(v), headers: { "content-type": "application/json" } });
const create = (body: unknown, token: string = TOKENS.admin) => api(h.url, "POST", "/v1/webhooks", { token, ...json(body) });
const list = (token: string = TOKENS.admin) => api(h.url, "GET", "/v1/webhooks", { token });
const stored = async () => {
  const keys: string[] = [];
  for await (const k of await kv.keys()) if ((await kv.get(k))?.operation === "PUT") keys.push(k);
  return keys;
};

describe("webhooks routes", () => {
  it("an admin registers a public URL: 201 with its secret once, sealed at rest; listed without it; removed", async () => {
    const r = await create({ url: "https://93.184.215.14/hooks", events: ["session.*", "runner.lose"], description: "ci" });
    expect(r.status).toBe(201);
    const made = r.json as CreatedWebhook;
    expect(made).toMatchObject({ workspaceId: WS1, url: "https://93.184.215.14/hooks", events: ["session.*", "runner.lose"], description: "ci", createdBy: "boss" });
    expect(made.secret).toMatch(/^whsec_[A-Za-z0-9+/]{32}$/);

    const entry = await kv.get(webhookKey(WS1, made.id));
    const record = WebhookRecord.parse(JSON.parse(Buffer.from(entry?.value ?? new Uint8Array()).toString()));
    expect(JSON.stringify(record)).not.toContain(made.secret.slice(6));
    expect(new SecretBox(KEY).open(webhookKey(WS1, made.id), Buffer.from(record.sealedSecret, "base64"))).toBe(made.secret);

    const l = await list();
    expect(l.status).toBe(200);
    const { secret: _secret, ...info } = made;
    expect(l.json).toEqual({ webhooks: [info] });
    expect(l.text).not.toContain(made.secret);
    expect((await api(h.url, "GET", `/v1/webhooks/${made.id}/deliveries`, { token: TOKENS.admin })).json).toEqual({ deliveries: [] });

    const d = await api(h.url, "DELETE", `/v1/webhooks/${made.id}`, { token: TOKENS.admin });
    expect([d.status, d.json]).toEqual([200, info]);
    expect((await kv.get(webhookKey(WS1, made.id)))?.operation).toBe("PURGE");
    expect((await list()).json).toEqual({ webhooks: [] });
    expect((await api(h.url, "DELETE", `/v1/webhooks/${made.id}`, { token: TOKENS.admin })).status).toBe(404);
    expect((await api(h.url, "GET", `/v1/webhooks/${made.id}/deliveries`, { token: TOKENS.admin })).status).toBe(404);
  });

  it("is for admins of the workspace only: members, a session's token and outsiders change nothing", async () => {
    const body = { url: "https://93.184.215.14/x" };
    expect((await create(body, TOKENS.alice)).status).toBe(403);
    expect((await create(body, TOKENS.svc)).status).toBe(403);
    expect((await create(body, TOKENS.outsider)).status).toBe(403);
    expect((await create(body, "tok_nobody_0123456789abcdef")).status).toBe(401);
    expect((await list(TOKENS.alice)).status).toBe(403);
    expect((await list(TOKENS.svc)).status).toBe(403);
    const made = (await create(body)).json as WebhookInfo;
    expect((await api(h.url, "DELETE", `/v1/webhooks/${made.id}`, { token: TOKENS.alice })).status).toBe(403);
    expect((await api(h.url, "GET", `/v1/webhooks/${made.id}/deliveries`, { token: TOKENS.alice })).status).toBe(403);
    expect(await stored()).toEqual([webhookKey(WS1, made.id)]);
    expect((await api(h.url, "DELETE", `/v1/webhooks/${made.id}`, { token: TOKENS.admin })).status).toBe(200);
  });

  it("refuses bad input and private targets (400), storing nothing", async () => {
    const bad: unknown[] = [
      {},
      { url: "ftp://93.184.215.14/x" },
      { url: "https://user:pass@93.184.215.14/x" },
      { url: "https://93.184.215.14/x#frag" },
      { url: "not a url" },
      { url: `https://93.184.215.14/${"x".repeat(2048)}` },
      { url: "https://93.184.215.14/x", events: ["session.nope"] },
      { url: "https://93.184.215.14/x", events: ["sess*"] },
      { url: "https://93.184.215.14/x", events: "session.*" },
      { url: "https://93.184.215.14/x", extra: 1 },
      { url: "https://93.184.215.14/x", description: "d".repeat(257) },
      // Private, loopback, link-local (the metadata address) and a name resolving to loopback: refused unless the operator allows them.
      { url: "http://127.0.0.1:8080/hook" },
      { url: "http://localhost/hook" },
      { url: "http://[::1]/hook" },
      { url: "http://10.0.0.7/hook" },
      { url: "http://169.254.169.254/latest/meta-data" },
      { url: "http://[::ffff:192.168.1.1]/hook" },
    ];
    for (const body of bad) expect([body, (await create(body)).status]).toEqual([body, 400]);
    const raw = await api(h.url, "POST", "/v1/webhooks", { token: TOKENS.admin, body: "{not json", headers: { "content-type": "application/json" } });
    expect(raw.status).toBe(400);
    expect(await stored()).toEqual([]);
  });

  it(`holds at most ${MAX_WEBHOOKS_PER_WORKSPACE} webhooks per workspace (409 past it)`, async () => {
    const ids: string[] = [];
    for (let i = 0; i < MAX_WEBHOOKS_PER_WORKSPACE; i++) ids.push(((await create({ url: `https://93.184.215.14/${i}` })).json as WebhookInfo).id);
    expect((await create({ url: "https://93.184.215.14/one-more" })).status).toBe(409);
    for (const id of ids) expect((await api(h.url, "DELETE", `/v1/webhooks/${id}`, { token: TOKENS.admin })).status).toBe(200);
    expect(await stored()).toEqual([]);
  });
});
