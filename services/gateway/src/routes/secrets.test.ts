import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Kvm, type KV } from "@nats-io/kv";
import { jetstreamManager } from "@nats-io/jetstream";
import { SecretBox } from "@paddock/bus";
import { Buckets, kvStreamName } from "@paddock/contracts";
import { seedMember } from "../auth/auth.ts";
import { api, startHarness, TOKENS, WS1, WS2, type Harness } from "../testing/testkit.ts";

const KEY = randomBytes(32);
let h: Harness;
let kv: KV;

beforeAll(async () => {
  h = await startHarness({ config: { secretsKey: KEY } });
  kv = await new Kvm(h.nc).open(Buckets.secrets);
});
afterAll(async () => {
  await h.stop();
});

const json = (v: unknown) => ({ body: JSON.stringify(v), headers: { "content-type": "application/json" } });
const put = (name: string, body: unknown, token: string = TOKENS.admin) => api(h.url, "PUT", `/v1/secrets/${name}`, { token, ...json(body) });
const list = (token: string = TOKENS.admin) => api(h.url, "GET", "/v1/secrets", { token });

describe("secret store routes", () => {
  it("an admin stores a value (204, no body), lists names only, and deletes it", async () => {
    const value = `s3cr3t-${randomBytes(8).toString("hex")}`;
    const r = await put("API_KEY", { value });
    expect(r.status).toBe(204);
    expect(r.text).toBe("");
    const l = await list();
    expect(l.status).toBe(200);
    expect(l.json).toEqual({ secrets: [{ name: "API_KEY" }] });
    expect(l.text).not.toContain(value);
    // Members may list names too.
    expect((await list(TOKENS.alice)).json).toEqual({ secrets: [{ name: "API_KEY" }] });

    // At rest: sealed under the configured key, bound to its KV key.
    const entry = await kv.get(`${WS1}.API_KEY`);
    expect(Buffer.from(entry!.value).toString()).not.toContain(value);
    expect(new SecretBox(KEY).open(`${WS1}.API_KEY`, entry!.value)).toBe(value);
    expect(() => new SecretBox(KEY).open(`${WS2}.API_KEY`, entry!.value)).toThrow(/could not be decrypted/);
    expect(() => new SecretBox(undefined).open(`${WS1}.API_KEY`, entry!.value)).toThrow(/no key/);

    // Replace: still one revision, the old value is gone from the stream.
    const next = `s3cr3t-${randomBytes(8).toString("hex")}`;
    expect((await put("API_KEY", { value: next })).status).toBe(204);
    const jsm = await jetstreamManager(h.nc);
    const info = await jsm.streams.info(kvStreamName(Buckets.secrets));
    expect(info.config.max_msgs_per_subject).toBe(1);

    const d = await api(h.url, "DELETE", "/v1/secrets/API_KEY", { token: TOKENS.admin });
    expect(d.status).toBe(204);
    expect(d.text).toBe("");
    const gone = await kv.get(`${WS1}.API_KEY`);
    expect(gone?.operation).toBe("PURGE");
    expect(gone?.value.length).toBe(0);
    expect((await list()).json).toEqual({ secrets: [] });
    expect((await api(h.url, "DELETE", "/v1/secrets/API_KEY", { token: TOKENS.admin })).status).toBe(404);
  });

  it("scopes names by workspace: another workspace neither lists nor deletes them", async () => {
    expect((await put("SHARED_NAME", { value: "ws1-value" })).status).toBe(204);
    expect((await put("SHARED_NAME", { value: "ws2-value" }, TOKENS.eve)).status).toBe(204);
    expect((await put("ONLY_WS1", { value: "x" })).status).toBe(204);
    expect((await list(TOKENS.eve)).json).toEqual({ secrets: [{ name: "SHARED_NAME" }] });
    expect((await api(h.url, "DELETE", "/v1/secrets/ONLY_WS1", { token: TOKENS.eve })).status).toBe(404);
    expect(await kv.get(`${WS1}.ONLY_WS1`)).not.toBeNull();
    expect(new SecretBox(KEY).open(`${WS1}.SHARED_NAME`, (await kv.get(`${WS1}.SHARED_NAME`))!.value)).toBe("ws1-value");
  });

  it("authenticates first, then validates, then authorizes on the current membership", async () => {
    const value = "never-echoed-value";
    expect((await put("X", { value }, "tok_nope_0123456789")).status).toBe(401);
    expect((await api(h.url, "PUT", "/v1/secrets/X", json({ value }))).status).toBe(401);
    expect((await api(h.url, "GET", "/v1/secrets")).status).toBe(401);
    expect((await put("X", { value }, TOKENS.expired)).status).toBe(401);
    // Member (not admin): forbidden to write or delete; bad input is still invalid first.
    const m = await put("X", { value }, TOKENS.alice);
    expect(m.status).toBe(403);
    expect(m.text).not.toContain(value);
    expect((await put("1BAD", { value }, TOKENS.alice)).status).toBe(400);
    expect((await api(h.url, "DELETE", "/v1/secrets/X", { token: TOKENS.alice })).status).toBe(403);
    // Not a member at all; a session's own token.
    expect((await put("X", { value }, TOKENS.outsider)).status).toBe(403);
    expect((await list(TOKENS.outsider)).status).toBe(403);
    expect((await put("X", { value }, TOKENS.svc)).status).toBe(403);
    expect((await list(TOKENS.svc)).status).toBe(403);
    // Demoted now: the next write is refused (membership is read on every call).
    await seedMember(h.nc, { workspaceId: WS1, actorId: "bob", role: "admin" });
    expect((await put("BOB_SET", { value }, TOKENS.bob)).status).toBe(204);
    await seedMember(h.nc, { workspaceId: WS1, actorId: "bob", role: "member" });
    expect((await put("BOB_SET", { value }, TOKENS.bob)).status).toBe(403);
  });

  it("refuses bad names, bodies and queries without echoing the value", async () => {
    const value = `s3cr3t-${randomBytes(8).toString("hex")}`;
    const bad: Array<[string, string, Record<string, string> | undefined, number]> = [
      ["1LEADING_DIGIT", JSON.stringify({ value }), undefined, 400],
      ["has-dash", JSON.stringify({ value }), undefined, 400],
      ["has.dot", JSON.stringify({ value }), undefined, 400],
      ["%2A", JSON.stringify({ value }), undefined, 400],
      ["%3E", JSON.stringify({ value }), undefined, 400],
      ["A".repeat(129), JSON.stringify({ value }), undefined, 400],
      ["OK", "not json " + value, undefined, 400],
      ["OK", "", undefined, 400],
      ["OK", JSON.stringify({}), undefined, 400],
      ["OK", JSON.stringify({ value: "" }), undefined, 400],
      ["OK", JSON.stringify({ value: 42 }), undefined, 400],
      ["OK", JSON.stringify({ value: null }), undefined, 400],
      ["OK", JSON.stringify([value]), undefined, 400],
      ["OK", JSON.stringify(value), undefined, 400],
      ["OK", JSON.stringify({ value, extra: value }), undefined, 400],
      ["OK", JSON.stringify({ value: `${value}\u0000` }), undefined, 400],
      ["OK", JSON.stringify({ value: value + "x".repeat(32 * 1024) }), undefined, 400],
    ];
    for (const [name, body, headers, status] of bad) {
      const r = await api(h.url, "PUT", `/v1/secrets/${name}`, { token: TOKENS.admin, body, headers: { "content-type": "application/json", ...headers } });
      expect(r.status, `${name} ${body.slice(0, 40)}`).toBe(status);
      expect(r.json?.error?.code).toBe("invalid");
      expect(r.text).not.toContain(value);
    }
    const q = await api(h.url, "PUT", "/v1/secrets/OK?x=1", { token: TOKENS.admin, ...json({ value }) });
    expect(q.status).toBe(400);
    expect((await api(h.url, "GET", "/v1/secrets?name=OK", { token: TOKENS.admin })).status).toBe(400);
    expect((await api(h.url, "DELETE", "/v1/secrets/bad-name", { token: TOKENS.admin })).status).toBe(400);
    expect((await api(h.url, "POST", "/v1/secrets/OK", { token: TOKENS.admin, ...json({ value }) })).status).toBe(405);
    // Over the 64 KiB body cap: too_large, reading stops.
    const big = await api(h.url, "PUT", "/v1/secrets/OK", { token: TOKENS.admin, body: JSON.stringify({ value: value + "y".repeat(70 * 1024) }), headers: { "content-type": "application/json" } }).catch(() => ({ status: 413, text: "", json: undefined }));
    expect(big.status).toBe(413);
    expect(big.text).not.toContain(value);
    // Nothing was stored by any of them; a 32 KiB value (over the gateway's general body cap) is fine.
    expect(await kv.get(`${WS1}.OK`)).toBeNull();
    expect((await put("OK", { value: "z".repeat(32 * 1024) })).status).toBe(204);
  });
});
