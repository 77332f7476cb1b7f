/**
 * Usage through the real stack: the runner samples each sandbox, and each
 * placement generation's usage lands on exactly one audit event — so a total
 * over the audit stream never counts a generation twice across a resume.
 */
import { afterAll, beforeAll, expect, it } from "vitest";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import type { AuditEvent } from "@paddock/contracts";
import { startStack, type Stack } from "@paddock/testing";
import { api, sessionOf, Terminal, waitForAuditEvents } from "./helpers.ts";

let stack: Stack;
let nc: NatsConnection;
beforeAll(async () => {
  stack = await startStack();
  nc = await connect({ servers: stack.nats.url });
});
afterAll(async () => {
  await nc?.drain();
  await stack?.stop();
});

const withUsage = (events: AuditEvent[]) => events.filter((e) => e.usage.cpuTimeSeconds > 0 || e.usage.storageBytes > 0 || e.usage.memoryByteSeconds > 0);

it("each generation's usage is on one event: a cold suspend ends generation 1, the exit ends generation 2", async () => {
  const script =
    "if [ -f blob ]; then echo resumed; read go; i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done; exit 0; fi; " +
    "head -c 1000000 /dev/zero > blob; i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done; echo ready; exec sleep 600";
  const s = sessionOf(await api(stack.url, stack.token, "POST", "/v1/sessions", { spec: { cmd: ["sh", "-c", script] } }));
  const term = await Terminal.open(stack.url, stack.token, s.id, "since=all");
  await term.until((t) => t.output().includes("ready"));
  term.ws.close();
  expect(sessionOf(await api(stack.url, stack.token, "POST", `/v1/sessions/${s.id}/suspend`, { warm: false })).state).toBe("suspended_cold");
  expect(sessionOf(await api(stack.url, stack.token, "POST", `/v1/sessions/${s.id}/resume`, {})).state).toBe("running");
  const controller = await Terminal.open(stack.url, stack.token, s.id, "mode=controller&since=all");
  await controller.until((t) => t.output().includes("resumed"));
  controller.ws.send(Buffer.from("go\n"));
  await controller.closed;

  const events = await waitForAuditEvents(nc, "default", s.id, (evs) => evs.some((e) => e.action === "exit"));
  const measured = withUsage(events);
  expect(measured.map((e) => [e.action, e.placementGeneration])).toEqual([
    ["suspend", 1],
    ["exit", 2],
  ]);
  for (const e of measured) {
    expect(e.usage.storageBytes).toBeGreaterThanOrEqual(1_000_000);
    expect(e.usage.memoryByteSeconds).toBeGreaterThanOrEqual(0);
  }
  expect(measured.some((e) => e.usage.cpuTimeSeconds > 0)).toBe(true);
});
