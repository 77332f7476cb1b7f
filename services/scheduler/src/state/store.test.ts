import { describe, expect, it } from "vitest";
import { Kvm } from "@nats-io/kv";
import { z } from "zod";
import { encodeJson, isWrongLastSequence } from "@paddock/bus";
import { ConflictError, InvalidError } from "@paddock/contracts";
import { useNatsServer } from "@paddock/testing/vitest";
import { CasConflictError, Records } from "./store.ts";

const Schema = z.object({ n: z.number() }).strict();

describe("records (real nats-server)", () => {
  const nats = useNatsServer();

  it("a lost create or compare-and-set is a typed conflict carrying the store's refusal as its cause", async () => {
    const kv = await new Kvm(nats.nc).create("records-test");
    const records = new Records(kv, Schema, encodeJson);
    const first = await records.create("k", { n: 1 });

    const taken = await records.create("k", { n: 2 }).catch((e: unknown) => e);
    expect(taken).toBeInstanceOf(ConflictError);
    expect(isWrongLastSequence((taken as Error).cause)).toBe(true);

    await records.update("k", { n: 3 }, first.revision);
    const lost = await records.update("k", { n: 4 }, first.revision).catch((e: unknown) => e);
    expect(lost).toBeInstanceOf(CasConflictError);
    expect((lost as CasConflictError).retryable).toBe(true);
    expect(isWrongLastSequence((lost as Error).cause)).toBe(true);
    expect((await records.get("k"))?.value).toEqual({ n: 3 });
  });

  it("writes through the encoder it is given: a checking one refuses a record that breaks its schema and writes nothing", async () => {
    const kv = await new Kvm(nats.nc).create("records-encode");
    const records = new Records(kv, Schema, encodeJson);
    await expect(records.create("bad", { n: "x" } as never)).rejects.toBeInstanceOf(InvalidError);
    expect(await kv.get("bad")).toBeNull();
  });
});
