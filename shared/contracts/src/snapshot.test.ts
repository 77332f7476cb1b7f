import { describe, expect, it } from "vitest";
import { snapshotOutcome } from "./snapshot.ts";
import type { Checkpoint, Session } from "./session.ts";

const checkpoint: Checkpoint = { ref: "checkpoints/ws1/s1/1-req_a", format: "tar+gzip", capabilities: ["portable"] };
const base = {
  id: "s1",
  workspaceId: "ws1",
  state: "running",
  createdAt: 1,
  updatedAt: 1,
  lastFact: { eventId: "e1", action: "snapshot", actorId: "r1", at: 1 },
} as unknown as Session;

describe("snapshotOutcome", () => {
  it("reads each outcome of a request from the record alone", () => {
    expect(snapshotOutcome({ ...base, snapshot: { requestId: "req_a", checkpoint, at: 2 } }, "req_a")).toEqual({ status: "taken", checkpoint });
    expect(snapshotOutcome({ ...base, pending: { op: "snapshot", requestId: "req_a", requestedAt: 1 } }, "req_a")).toEqual({ status: "pending" });
    expect(snapshotOutcome({ ...base, refusal: { requestId: "req_a", op: "snapshot", reason: "disk full", at: 2 } }, "req_a")).toEqual({ status: "refused", reason: "disk full" });
    expect(snapshotOutcome({ ...base, state: "destroyed" }, "req_a")).toEqual({ status: "ended", state: "destroyed" });
    expect(snapshotOutcome(base, "req_a")).toEqual({ status: "unknown" });
  });

  it("a taken snapshot stays taken after the session ended; another request's outcome is not this one's", () => {
    const s = { ...base, state: "destroyed", snapshot: { requestId: "req_a", checkpoint, at: 2 }, refusal: { requestId: "req_b", op: "snapshot", reason: "x", at: 3 } } as Session;
    expect(snapshotOutcome(s, "req_a")).toEqual({ status: "taken", checkpoint });
    expect(snapshotOutcome(s, "req_b")).toEqual({ status: "refused", reason: "x" });
    expect(snapshotOutcome(s, "req_c")).toEqual({ status: "ended", state: "destroyed" });
  });
});
