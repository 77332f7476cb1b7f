import { describe, expect, it } from "vitest";
import { jetstreamManager, JetStreamApiError } from "@nats-io/jetstream";
import { jserrors } from "@nats-io/jetstream/internal";
import { NoRespondersError, TimeoutError } from "@nats-io/transport-node";
import { PaddockError, UnavailableError } from "@paddock/contracts";
import { useNatsServer } from "@paddock/testing/vitest";
import { isDirectGetEmpty, isStreamNameInUse, isStreamNotFound, toPaddockError } from "./errors.ts";

function named(name: string): Error {
  const e = new Error("raw detail");
  e.name = name;
  return e;
}

describe("toPaddockError", () => {
  it("maps a broker that is not answering to unavailable (503, retryable), including JetStream's no-responders during a leader election", () => {
    for (const err of [new TimeoutError(), new NoRespondersError("$JS.API.INFO"), new jserrors.JetStreamNotEnabled("jetstream is not enabled")]) {
      const mapped = toPaddockError(err);
      expect(mapped.code, err.name).toBe("unavailable");
      expect(mapped.retryable).toBe(true);
      expect(mapped.cause).toBe(err);
    }
  });

  it("matches NATS errors by class: an error that only borrows a NATS error's name is internal", () => {
    for (const name of ["TimeoutError", "NoRespondersError", "JetStreamNotEnabled"]) {
      expect(toPaddockError(named(name)).code, name).toBe("internal");
    }
  });

  it("maps the server's 503 \"JetStream system temporarily unavailable\" to unavailable; other API errors stay internal", () => {
    const electing = new JetStreamApiError({ code: 503, err_code: 10008, description: "JetStream system temporarily unavailable" });
    expect(toPaddockError(electing).code).toBe("unavailable");
    const wrongSeq = new JetStreamApiError({ code: 400, err_code: 10071, description: "wrong last sequence: 3" });
    expect(toPaddockError(wrongSeq).toBody()).toEqual({ code: "internal", message: "internal error" });
  });

  it("keeps a PaddockError and hides anything else as internal, keeping the original as its cause", () => {
    const own = new PaddockError("conflict", "x");
    expect(toPaddockError(own)).toBe(own);
    const raw = new TypeError("raw detail");
    const hidden = toPaddockError(raw);
    expect(hidden.toBody()).toEqual({ code: "internal", message: "internal error" });
    expect(hidden.cause).toBe(raw);
  });
});

describe("PaddockError", () => {
  it("carries an ES2022 cause that never reaches its body, and a retryable error carries when to retry", () => {
    const root = new Error("socket reset");
    const terminal = new PaddockError("conflict", "taken", { cause: root });
    expect([terminal.cause, terminal.retryable]).toEqual([root, false]);
    expect(terminal.toBody()).toEqual({ code: "conflict", message: "taken" });
    const later = new UnavailableError("busy", { cause: root, retryAfterMs: 1_500 });
    expect([later.cause, later.retryable, later.retryAfterMs]).toEqual([root, true, 1_500]);
    expect(new UnavailableError("busy").retryAfterMs).toBeUndefined();
    expect("cause" in new PaddockError("invalid", "x")).toBe(false);
  });
});

describe("JetStream refusals, matched by class and API code against a real server", () => {
  const nats = useNatsServer();

  it("tells a missing stream, a stream name taken with another config and an empty direct get apart; a look-alike by name or message is none of them", async () => {
    const jsm = await jetstreamManager(nats.nc);
    const missing = await jsm.streams.info("NOPE").catch((e: unknown) => e);
    expect([isStreamNotFound(missing), isStreamNameInUse(missing), isDirectGetEmpty(missing)]).toEqual([true, false, false]);

    await jsm.streams.add({ name: "ERRS", subjects: ["errs.>"], allow_direct: true });
    const taken = await jsm.streams.add({ name: "ERRS", subjects: ["other.>"] }).catch((e: unknown) => e);
    expect([isStreamNotFound(taken), isStreamNameInUse(taken), isDirectGetEmpty(taken)]).toEqual([false, true, false]);

    // A batch direct get with nothing at or after its start answers 404, not an empty batch.
    const empty = await (async () => {
      for await (const m of await jsm.direct.getBatch("ERRS", { seq: 1, batch: 8, next_by_subj: "errs.x" })) return m;
      return undefined;
    })().catch((e: unknown) => e);
    expect([isStreamNotFound(empty), isStreamNameInUse(empty), isDirectGetEmpty(empty)]).toEqual([false, false, true]);

    const lookAlike = Object.assign(named("JetStreamStatusError"), { code: 404, message: "no message found" });
    expect([isStreamNotFound(lookAlike), isStreamNameInUse(lookAlike), isDirectGetEmpty(lookAlike)]).toEqual([false, false, false]);
  });
});
