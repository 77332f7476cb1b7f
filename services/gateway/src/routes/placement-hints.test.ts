import { describe, expect, it } from "vitest";
import { makeSession } from "@paddock/testing";
import { PlacementHints } from "./placement-hints.ts";

const held = (id: string, generation = 1, runnerId = "runner-1") => makeSession({ id, state: "running", poolId: "default", runnerId, placementGeneration: generation });

describe("placement hints", () => {
  it("are per caller and per session: another token, or another session, has none", () => {
    const hints = new PlacementHints();
    hints.remember("tok-a", held("s1"));
    expect(hints.get("tok-a", "s1")).toMatchObject({ sessionId: "s1", poolId: "default", runnerId: "runner-1", placementGeneration: 1 });
    expect(hints.get("tok-b", "s1")).toBeUndefined();
    expect(hints.get("tok-a", "s2")).toBeUndefined();
  });

  it("hold only while the session is where the hint says: same runner, same placement generation", () => {
    const hints = new PlacementHints();
    hints.remember("tok", held("s1", 3));
    const hint = hints.get("tok", "s1")!;
    expect(PlacementHints.holds(hint, held("s1", 3))).toBe(true);
    expect(PlacementHints.holds(hint, held("s1", 4))).toBe(false);
    expect(PlacementHints.holds(hint, held("s1", 3, "runner-2"))).toBe(false);
  });

  it("forget a session found held nowhere (suspended cold, dead), and keep a warm-suspended one", () => {
    const hints = new PlacementHints();
    hints.remember("tok", held("s1"));
    hints.remember("tok", makeSession({ id: "s1", state: "suspended_cold", poolId: "default", runnerId: "runner-1" }));
    expect(hints.get("tok", "s1")).toBeUndefined();
    hints.remember("tok", makeSession({ id: "s1", state: "suspended_warm", poolId: "default", runnerId: "runner-1" }));
    expect(hints.get("tok", "s1")).toBeDefined();
    hints.remember("tok", makeSession({ id: "s1", state: "dead", poolId: "default", runnerId: "runner-1" }));
    expect(hints.get("tok", "s1")).toBeUndefined();
  });

  it("are bounded: the one found least recently goes first", () => {
    const hints = new PlacementHints(2);
    hints.remember("tok", held("s1"));
    hints.remember("tok", held("s2"));
    // Found again: now the most recent.
    hints.remember("tok", held("s1"));
    hints.remember("tok", held("s3"));
    expect([hints.get("tok", "s1"), hints.get("tok", "s2"), hints.get("tok", "s3")].map((h) => h?.sessionId)).toEqual(["s1", undefined, "s3"]);
  });
});
