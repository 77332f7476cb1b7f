import { describe, expect, it } from "vitest";
import { MAX_RESERVATIONS } from "@paddock/contracts";
import { makeRunner } from "@paddock/testing";
import { recentlyReserved, withReservation } from "./slots.ts";

describe("slot reservations", () => {
  it("drop what left the window, keep the rest oldest first", () => {
    const list = withReservation([{ at: 100, count: 2 }, { at: 900, count: 1 }], 1_000, 3, 500);
    expect(list).toEqual([{ at: 900, count: 1 }, { at: 1_000, count: 3 }]);
  });

  it("past the cap merge the oldest into the next, losing no slot", () => {
    const full = Array.from({ length: MAX_RESERVATIONS }, (_, i) => ({ at: 1_000 + i, count: 1 }));
    const list = withReservation(full, 2_000, 1, 10_000);
    expect(list).toHaveLength(MAX_RESERVATIONS);
    expect(list[0]).toEqual({ at: 1_001, count: 2 });
    expect(list.reduce((n, r) => n + r.count, 0)).toBe(MAX_RESERVATIONS + 1);
  });

  it("count as taken only within the window", () => {
    const runner = makeRunner({ reservations: [{ at: 100, count: 2 }, { at: 900, count: 1 }] });
    expect(recentlyReserved(runner, 1_000, 500)).toBe(1);
    expect(recentlyReserved(runner, 1_000, 1_000)).toBe(3);
    expect(recentlyReserved(makeRunner(), 1_000, 1_000)).toBe(0);
  });
});
