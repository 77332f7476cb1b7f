import { describe, expect, it } from "vitest";
import { JetStreamApiError } from "@nats-io/jetstream";
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

  it("maps the server's 503 \"JetStream system temporarily unavailable\" to unavailable; other API errors stay internal", () => {
    const electing = new JetStreamApiError({ code: 503, err_code: 10008, description: "JetStream system temporarily unavailable" });
    expect(toPaddockError(electing).code).toBe("unavailable");
    const wrongSeq = new JetStreamApiError({ code: 400, err_code: 10071, description: "wrong last sequence: 3" });
    expect(toPaddockError(wrongSeq).toBody()).toEqual({ code: "internal", message: "internal error" });
  });

  it("keeps a PaddockError and hides anything else as internal", () => {
    const own = new PaddockError("conflict", "x");
    expect(toPaddockError(own)).toBe(own);
    expect(toPaddockError(named("TypeError")).toBody()).toEqual({ code: "internal", message: "internal error" });
  });
});
