import { randomBytes } from "node:crypto";
import { Readable } from "node:stream";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { Objm, type ObjectStore } from "@nats-io/obj";
import type { Subscription } from "@nats-io/transport-node";
import { createBusMetrics, serveRpc } from "@paddock/bus";
import { InvalidError, ObjectStores, transferObjectName, transferRef, workspaceRpcs, type WorkspaceDiffReply } from "@paddock/contracts";
import { silentLogger } from "@paddock/logging";
import { newSealKey, sealed, sealKeyFrom, unsealed } from "@paddock/archive";
import { api, expectError, makeSession, RUNNER, startHarness, TOKENS, WS1, WS2, type Harness } from "../testing/testkit.ts";

const MAX_UPLOAD = 64 * 1024;
let h: Harness;
let transfers: ObjectStore;
let subs: Subscription[] = [];
/** What the stand-in runner was asked, and the bytes it found in each pushed object. */
const seen: Array<{ op: string; request: Record<string, unknown>; bytes?: Buffer; raw?: Buffer }> = [];
const pullBlob = randomBytes(200_000);
const diffReply: WorkspaceDiffReply = { repos: [{ path: "app", diff: "+two\n", truncated: false }], truncated: false };

/** A runner that holds every session: reads pushed objects, writes pulled ones (real object store). */
function fakeRunner(): Subscription[] {
  const rpcs = workspaceRpcs(RUNNER.poolId, RUNNER.id);
  const opts = { queue: "runner", metrics: createBusMetrics(), log: silentLogger() };
  return [
    serveRpc(
      h.nc,
      rpcs.push,
      async (req) => {
        const name = transferObjectName(req.workspaceId, req.sessionId, req.transferId);
        const raw = (await transfers.getBlob(name)) ?? new Uint8Array();
        const bytes = Buffer.concat(await unsealed(Readable.from([raw]), sealKeyFrom(req.sealKey), transferRef(name)).toArray());
        seen.push({ op: "push", request: req, bytes, raw: Buffer.from(raw) });
        if (req.path === "refuse") throw new InvalidError("archive refused: path contains ..");
        return { entries: 1, bytes: bytes.length, reload: false };
      },
      opts,
    ),
    serveRpc(
      h.nc,
      rpcs.pull,
      async (req) => {
        seen.push({ op: "pull", request: req });
        const name = transferObjectName(req.workspaceId, req.sessionId, req.transferId);
        // "forged": an object sealed under a key other than the request's (replaced in the shared store).
        const key = req.path === "forged" ? newSealKey() : sealKeyFrom(req.sealKey);
        await transfers.put({ name }, Readable.toWeb(sealed(Readable.from([pullBlob]), key, transferRef(name))) as unknown as ReadableStream<Uint8Array>);
        return { size: pullBlob.length };
      },
      opts,
    ),
    serveRpc(
      h.nc,
      rpcs.diff,
      (req) => {
        seen.push({ op: "diff", request: req });
        return Promise.resolve(diffReply);
      },
      opts,
    ),
  ];
}

beforeAll(async () => {
  h = await startHarness({ config: { maxUploadBytes: MAX_UPLOAD } });
  transfers = await new Objm(h.nc).open(ObjectStores.transfers);
  subs = fakeRunner();
});
afterAll(async () => {
  for (const s of subs) s.unsubscribe();
  await h.stop();
});
beforeEach(() => {
  seen.length = 0;
});

let n = 0;
function fresh(state: "running" | "suspended_warm" | "suspended_cold" | "queued" = "running", ws = WS1, creatorId = "alice"): string {
  const id = `wk${++n}`;
  const placed = state === "running" || state === "suspended_warm" ? { poolId: RUNNER.poolId, runnerId: RUNNER.id } : {};
  h.scheduler.put(makeSession({ id, workspaceId: ws, creatorId, state, placementGeneration: 3, ...placed }));
  return id;
}

async function leftovers(): Promise<number> {
  return (await transfers.list()).length;
}

describe("PUT /v1/sessions/:id/workspace", () => {
  it("streams the body to the runner through a transfer object, then deletes it", async () => {
    const id = fresh();
    const body = randomBytes(50_000);
    const r = await api(h.url, "PUT", `/v1/sessions/${id}/workspace?path=src/app`, { token: TOKENS.alice, body });
    expect(r.status).toBe(200);
    expect(r.json).toMatchObject({ entries: 1, reload: false });
    expect(seen).toHaveLength(1);
    expect(seen[0]?.request).toMatchObject({ sessionId: id, workspaceId: WS1, placementGeneration: 3, path: "src/app" });
    expect(seen[0]?.bytes?.equals(body)).toBe(true);
    // What sat in the shared store was sealed, under a key only the request carried.
    expect(seen[0]?.raw?.includes(body.subarray(0, 64))).toBe(false);
    expect(seen[0]?.request.sealKey).toMatch(/^[A-Za-z0-9+/]{43}=$/);
    expect(await leftovers()).toBe(0);
  });

  it("a warm-suspended session takes pushes; an admin may push into another's session", async () => {
    expect((await api(h.url, "PUT", `/v1/sessions/${fresh("suspended_warm")}/workspace`, { token: TOKENS.admin, body: "x" })).status).toBe(200);
  });

  it("refuses bad input before anything reaches the runner", async () => {
    const id = fresh();
    const put = (path: string, token?: string, body: string | Buffer = "x") => api(h.url, "PUT", path, { ...(token ? { token } : {}), body });
    for (const q of ["?path=../x", "?path=a/../../x", "?path=/etc", "?path=a%5Cb", "?path=a%00b", `?path=${"a".repeat(1025)}`, "?other=1", "?path=a&path=b"]) {
      expectError(await put(`/v1/sessions/${id}/workspace${q}`, TOKENS.alice), 400, "invalid");
    }
    expectError(await put(`/v1/sessions/bad.id/workspace`, TOKENS.alice), 400, "invalid");
    expectError(await put(`/v1/sessions/${id}/workspace`), 401, "unauthenticated");
    expectError(await put(`/v1/sessions/${id}/workspace`, "tok_wrong_0123456789"), 401, "unauthenticated");
    expectError(await put(`/v1/sessions/${id}/workspace`, TOKENS.expired), 401, "unauthenticated");
    expectError(await put(`/v1/sessions/${id}/workspace`, TOKENS.eve), 404, "not_found");
    expectError(await put(`/v1/sessions/${fresh("running", WS2, "eve")}/workspace`, TOKENS.alice), 404, "not_found");
    expectError(await put(`/v1/sessions/${id}/workspace`, TOKENS.bob), 403, "forbidden");
    expectError(await put(`/v1/sessions/${id}/workspace`, TOKENS.outsider), 404, "not_found");
    expectError(await put(`/v1/sessions/${id}/workspace`, TOKENS.svc), 404, "not_found");
    expectError(await put(`/v1/sessions/${fresh("queued")}/workspace`, TOKENS.alice), 409, "conflict");
    expect(seen).toEqual([]);
  });

  it("an upload over the maximum is 413 too_large, by content-length or while streaming chunked", async () => {
    const id = fresh();
    const big = randomBytes(MAX_UPLOAD + 1);
    const declared = await api(h.url, "PUT", `/v1/sessions/${id}/workspace`, { token: TOKENS.alice, body: big });
    expectError(declared, 413, "too_large");
    const chunked = await fetch(`${h.url}/v1/sessions/${id}/workspace`, {
      method: "PUT",
      headers: { authorization: `Bearer ${TOKENS.alice}` },
      body: new ReadableStream<Uint8Array>({
        start(c) {
          for (let i = 0; i < 8; i++) c.enqueue(randomBytes(16 * 1024));
          c.close();
        },
      }),
      duplex: "half",
    } as RequestInit);
    expect(chunked.status).toBe(413);
    expect(await chunked.json()).toMatchObject({ error: { code: "too_large" } });
    expect(seen).toEqual([]);
    expect(await leftovers()).toBe(0);
  });

  it("a refusal by the runner is the client's error, and the object is still deleted", async () => {
    const r = await api(h.url, "PUT", `/v1/sessions/${fresh()}/workspace?path=refuse`, { token: TOKENS.alice, body: "x" });
    expectError(r, 400, "invalid");
    expect(r.json.error.message).toMatch(/archive refused/);
    expect(await leftovers()).toBe(0);
  });
});

describe("GET /v1/sessions/:id/workspace", () => {
  it("streams the runner's archive as application/gzip and deletes the object", async () => {
    const id = fresh();
    const res = await fetch(`${h.url}/v1/sessions/${id}/workspace?path=src`, { headers: { authorization: `Bearer ${TOKENS.bob}` } });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("application/gzip");
    expect(res.headers.get("content-length")).toBe(String(pullBlob.length));
    expect(Buffer.from(await res.arrayBuffer()).equals(pullBlob)).toBe(true);
    expect(seen[0]?.request).toMatchObject({ sessionId: id, path: "src", placementGeneration: 3 });
    expect(await leftovers()).toBe(0);
  });

  it("an archive that does not open with the transfer's key is never delivered whole", async () => {
    const id = fresh();
    const download = fetch(`${h.url}/v1/sessions/${id}/workspace?path=forged`, { headers: { authorization: `Bearer ${TOKENS.alice}` } }).then((r) => r.arrayBuffer());
    // The status was decided before the first frame was checked: the connection is cut, the download never completes.
    await expect(download).rejects.toThrow();
    expect(await leftovers()).toBe(0);
  });

  it("refuses bad input", async () => {
    const id = fresh();
    const get = (path: string, token?: string) => api(h.url, "GET", path, token ? { token } : {});
    expectError(await get(`/v1/sessions/${id}/workspace?path=../x`, TOKENS.alice), 400, "invalid");
    expectError(await get(`/v1/sessions/${id}/workspace?path=/x`, TOKENS.alice), 400, "invalid");
    expectError(await get(`/v1/sessions/b@d/workspace`, TOKENS.alice), 400, "invalid");
    expectError(await get(`/v1/sessions/${id}/workspace`), 401, "unauthenticated");
    expectError(await get(`/v1/sessions/${id}/workspace`, TOKENS.eve), 404, "not_found");
    expectError(await get(`/v1/sessions/${id}/workspace`, TOKENS.outsider), 404, "not_found");
    expect(seen).toEqual([]);
  });
});

describe("GET /v1/sessions/:id/diff", () => {
  it("answers the runner's per-repository diff to any member", async () => {
    const r = await api(h.url, "GET", `/v1/sessions/${fresh()}/diff`, { token: TOKENS.bob });
    expect(r.status).toBe(200);
    expect(r.json).toEqual(diffReply);
  });

  it("refuses bad input", async () => {
    const id = fresh();
    const get = (path: string, token?: string) => api(h.url, "GET", path, token ? { token } : {});
    expectError(await get(`/v1/sessions/${id}/diff?path=x`, TOKENS.alice), 400, "invalid");
    expectError(await get(`/v1/sessions/a.b/diff`, TOKENS.alice), 400, "invalid");
    expectError(await get(`/v1/sessions/${id}/diff`), 401, "unauthenticated");
    expectError(await get(`/v1/sessions/${id}/diff`, TOKENS.eve), 404, "not_found");
    expectError(await get(`/v1/sessions/${id}/diff`, TOKENS.outsider), 404, "not_found");
    expectError(await get(`/v1/sessions/${fresh("queued")}/diff`, TOKENS.alice), 409, "conflict");
    expect(seen).toEqual([]);
  });

  it("a runner that does not answer is 503 unavailable", async () => {
    const id = `wk${++n}`;
    h.scheduler.put(makeSession({ id, workspaceId: WS1, creatorId: "alice", poolId: "default", runnerId: "gone" }));
    expectError(await api(h.url, "GET", `/v1/sessions/${id}/diff`, { token: TOKENS.alice }), 503, "unavailable");
  });
});
