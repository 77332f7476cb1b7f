import { describe, expect, it } from "vitest";
import { PaddockError } from "@paddock/contracts";
import { toPaddockError } from "./errors.ts";

function named(name: string): Error {
  const e = new Error("raw detail");
  e.name = name;
  return e;
}

describe("toPaddockError", () => {
  it("maps a broker that is not answering to unavailable (503, retryable), including JetStream's no-responders during a leader election", () => {
    for (const name of ["TimeoutError", "NoRespondersError", "JetStreamNotEnabled"]) {
      expect(toPaddockError(named(name)).code, name).toBe("unavailable");
    }
  });

  it("keeps a PaddockError and hides anything else as internal", () => {
    const own = new PaddockError("conflict", "x");
    expect(toPaddockError(own)).toBe(own);
    expect(toPaddockError(named("TypeError")).toBody()).toEqual({ code: "internal", message: "internal error" });
  });
});
