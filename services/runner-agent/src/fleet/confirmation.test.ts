import { describe, expect, it } from "vitest";
import { RegistrationConfirmation } from "./confirmation.ts";

const TTL_MS = 2_000;

/** A clock the test moves; a jump stands for the runner process being stopped. */
function clock(start = 1_000_000) {
  let t = start;
  return { now: () => t, advance: (ms: number) => (t += ms) };
}

describe("registration confirmation", () => {
  it("holds for the lease TTL after the check was asked", () => {
    const c = clock();
    const confirmation = new RegistrationConfirmation(c.now, TTL_MS);
    const askedAt = confirmation.ask();
    c.advance(10);
    confirmation.confirm(askedAt);
    c.advance(TTL_MS - 10);
    expect(confirmation.holds()).toBe(true);
    c.advance(1);
    expect(confirmation.holds()).toBe(false);
  });

  it("an answer handled after a stop longer than the TTL does not confirm: it is dated by its question", () => {
    const c = clock();
    const confirmation = new RegistrationConfirmation(c.now, TTL_MS);
    const askedAt = confirmation.ask();
    // Stopped right after sending the read; the answer ("still registered", from before the stop) is handled on waking.
    c.advance(TTL_MS + 1_000);
    confirmation.confirm(askedAt);
    expect(confirmation.holds()).toBe(false);
    // A check asked now, after waking, confirms again.
    confirmation.confirm(confirmation.ask());
    expect(confirmation.holds()).toBe(true);
  });

  it("an older answer handled after a newer one never moves the confirmation back", () => {
    const c = clock();
    const confirmation = new RegistrationConfirmation(c.now, TTL_MS);
    const older = confirmation.ask();
    c.advance(1_500);
    const newer = confirmation.ask();
    confirmation.confirm(newer);
    confirmation.confirm(older);
    c.advance(TTL_MS);
    // Still within the TTL of the newer question (1,500 + 2,000 after the older one).
    expect(confirmation.holds()).toBe(true);
  });
});
