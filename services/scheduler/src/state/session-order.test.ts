import { describe, expect, it } from "vitest";
import { isTerminal, type Session, type SessionState } from "@paddock/contracts";
import { makeSession } from "@paddock/testing";
import { SessionOrder, type OrderCursor } from "./session-order.ts";

/** A small deterministic generator (mulberry32): the same seed replays the same run. */
function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const STATES: SessionState[] = ["queued", "creating", "running", "suspended_warm", "destroyed", "failed", "canceled"];

/** What the index must give: the records filtered and sorted from scratch. */
function naive(records: Map<string, Session>, q: { workspaceId: string; creatorId?: string; includeTerminal: boolean; after?: OrderCursor }): string[] {
  return [...records.entries()]
    .filter(([, s]) => s.workspaceId === q.workspaceId && (q.creatorId === undefined || s.creatorId === q.creatorId) && (q.includeTerminal || !isTerminal(s.state)))
    .filter(([, s]) => q.after === undefined || s.createdAt > q.after[0] || (s.createdAt === q.after[0] && s.id > q.after[1]))
    .sort(([, a], [, b]) => a.createdAt - b.createdAt || (a.id < b.id ? -1 : 1))
    .map(([key]) => key);
}

describe("session order", () => {
  it("lists each workspace's and creator's records in (createdAt, id) order, live or all, from any cursor, through creates, state changes and deletes out of order", () => {
    for (const seed of [1, 7, 42, 1234]) {
      const rand = seeded(seed);
      const pick = <T,>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)] as T;
      const order = new SessionOrder();
      const records = new Map<string, Session>();
      for (let step = 0; step < 2_000; step++) {
        const roll = rand();
        const keys = [...records.keys()];
        if (roll < 0.5 || keys.length === 0) {
          const id = `s${step.toString().padStart(5, "0")}`;
          // Mostly in creation order, some late and some on the same millisecond.
          const createdAt = 1_000 + step - (rand() < 0.2 ? Math.floor(rand() * 50) : 0);
          const s = makeSession({ id, workspaceId: pick(["w1", "w2"]), creatorId: pick(["alice", "bob", "s00003"]), createdAt, state: pick(STATES) });
          const key = `${s.workspaceId}.${id}`;
          order.onEntry(key, undefined, s);
          records.set(key, s);
        } else if (roll < 0.85) {
          const key = pick(keys);
          const prev = records.get(key) as Session;
          const next = { ...prev, state: pick(STATES) };
          order.onEntry(key, prev, next);
          records.set(key, next);
        } else {
          const key = pick(keys);
          order.onEntry(key, records.get(key), undefined);
          records.delete(key);
        }
        if (step % 97 !== 0) continue;
        for (const workspaceId of ["w1", "w2", "w3"]) {
          for (const creatorId of [undefined, "alice", "s00003"]) {
            for (const includeTerminal of [true, false]) {
              const q = { workspaceId, includeTerminal, ...(creatorId === undefined ? {} : { creatorId }) };
              const want = naive(records, q);
              expect([...order.keys(q)]).toEqual(want);
              // From a cursor that is a record's sort key, and from one that is none's.
              const mid = records.get(want[Math.floor(want.length / 2)] ?? "");
              const cursors: OrderCursor[] = mid ? [[mid.createdAt, mid.id], [mid.createdAt, `${mid.id}~`], [mid.createdAt - 0.5, ""]] : [[0, ""]];
              for (const after of cursors) expect([...order.keys({ ...q, after })]).toEqual(naive(records, { ...q, after }));
            }
          }
        }
      }
    }
  });

  it("keeps a record once however often a revision repeats, and lets it go when deleted", () => {
    const order = new SessionOrder();
    const s = makeSession({ id: "s1", workspaceId: "w", creatorId: "alice", createdAt: 5, state: "running" });
    order.onEntry("w.s1", undefined, s);
    order.onEntry("w.s1", s, { ...s });
    order.onEntry("w.s1", s, { ...s, state: "suspended_warm" });
    expect([...order.keys({ workspaceId: "w", includeTerminal: false })]).toEqual(["w.s1"]);
    order.onEntry("w.s1", s, { ...s, state: "destroyed" });
    expect([...order.keys({ workspaceId: "w", includeTerminal: false })]).toEqual([]);
    expect([...order.keys({ workspaceId: "w", includeTerminal: true })]).toEqual(["w.s1"]);
    order.onEntry("w.s1", { ...s, state: "destroyed" }, undefined);
    expect([...order.keys({ workspaceId: "w", includeTerminal: true })]).toEqual([]);
    expect([...order.keys({ workspaceId: "w", creatorId: "alice", includeTerminal: true })]).toEqual([]);
  });
});
