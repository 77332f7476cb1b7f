/**
 * Per-session metrics through the real stack (issue 28 item 5): the runner
 * holding a session samples its CPU, memory, workspace size and egress; the
 * route answers them with one taken at the read, so a busy session's CPU and
 * a file just written show at once; a session without a live sandbox has no
 * samples and is not woken by the read.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SESSION_METRICS_RETENTION_MS, type SessionMetrics } from "@paddock/contracts";
import { startStack, type Stack } from "@paddock/testing";
import { api } from "./helpers.ts";

let stack: Stack;
beforeAll(async () => {
  stack = await startStack();
});
afterAll(async () => {
  await stack?.stop();
});

const metricsOf = async (id: string): Promise<SessionMetrics> => {
  const r = await api(stack.url, stack.token, "GET", `/v1/sessions/${id}/metrics`);
  expect(r.status).toBe(200);
  return r.body as SessionMetrics;
};

describe("GET /v1/sessions/:id/metrics", () => {
  it("answers CPU, memory, disk and network samples of the live placement, the last taken at the read", async () => {
    // An app that keeps a core busy: its CPU time grows between any two reads.
    const created = await api(stack.url, stack.token, "POST", "/v1/sessions?wait=running&timeoutMs=60000", { spec: { cmd: ["sh", "-c", "while :; do :; done"] } });
    const id = (created.body as { id: string }).id;
    const first = await metricsOf(id);
    expect(first).toMatchObject({ sessionId: id, placementGeneration: 1, sampleMs: 5_000, retentionMs: SESSION_METRICS_RETENTION_MS });
    expect(first.samples.length).toBeGreaterThanOrEqual(1);
    const a = first.samples.at(-1);
    expect(a?.memoryBytes).toBeGreaterThan(0);
    // A 2 MB file written meanwhile: the next read's fresh sample walks the workspace again.
    const file = Buffer.alloc(2_000_000, 1);
    expect((await fetch(`${stack.url}/v1/sessions/${id}/files?path=big.bin`, { method: "PUT", headers: { authorization: `Bearer ${stack.token}` }, body: file })).status).toBe(200);
    const second = await metricsOf(id);
    const b = second.samples.at(-1);
    expect(second.samples.length).toBeGreaterThan(first.samples.length);
    expect(b?.at).toBeGreaterThanOrEqual(a?.at ?? 0);
    expect(b?.cpuSeconds).toBeGreaterThan(a?.cpuSeconds ?? 0);
    expect(b?.diskBytes).toBeGreaterThanOrEqual((a?.diskBytes ?? 0) + file.length);
    // Samples are oldest first.
    const times = second.samples.map((s) => s.at);
    expect([...times].sort((x, y) => x - y)).toEqual(times);
    await api(stack.url, stack.token, "DELETE", `/v1/sessions/${id}`);
  });

  it("a session without a live sandbox has no samples, and the read does not wake it; bad ids are refused", async () => {
    const created = await api(stack.url, stack.token, "POST", "/v1/sessions?wait=running&timeoutMs=60000", { spec: { cmd: ["sleep", "600"] } });
    const id = (created.body as { id: string }).id;
    const suspended = await api(stack.url, stack.token, "POST", `/v1/sessions/${id}/suspend?wait=suspended_cold&timeoutMs=60000`, { warm: false });
    expect((suspended.body as { state: string }).state).toBe("suspended_cold");
    expect((await metricsOf(id)).samples).toEqual([]);
    expect(((await api(stack.url, stack.token, "GET", `/v1/sessions/${id}`)).body as { state: string }).state).toBe("suspended_cold");
    expect((await api(stack.url, stack.token, "GET", "/v1/sessions/bad.id/metrics")).status).toBe(400);
    expect((await api(stack.url, stack.token, "GET", "/v1/sessions/ses_nothing_here/metrics")).status).toBe(404);
    expect((await api(stack.url, undefined, "GET", `/v1/sessions/${id}/metrics`)).status).toBe(401);
    await api(stack.url, stack.token, "DELETE", `/v1/sessions/${id}`);
  });
});
