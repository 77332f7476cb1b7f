import { mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { Objm } from "@nats-io/obj";
import { newSealKey, SealError } from "@paddock/archive";
import { ObjectStores, runnerObjectStore } from "@paddock/contracts";
import { useNatsServer } from "@paddock/testing/vitest";
import { CheckpointError } from "../errors.ts";
import { createCheckpointStore } from "./checkpoint.ts";

const nats = useNatsServer();
const owner = { poolId: "p1", runnerId: "r1" };

function workspaceWith(file: string, body: string): string {
  const dir = join(mkdtempSync(join(tmpdir(), "paddock-checkpoint-")), "workspace");
  mkdirSync(dir);
  writeFileSync(join(dir, file), body);
  return dir;
}

describe("checkpoint store errors", () => {
  it("a restore that fails keeps the fact-safe reason as its message and what went wrong as its cause", async () => {
    await new Objm(nats.nc).create(runnerObjectStore(ObjectStores.checkpoints, owner.poolId, owner.runnerId));
    const store = createCheckpointStore(nats.nc, owner);
    const saved = await store.save(ObjectStores.checkpoints, "ws1/s1/1-c1", workspaceWith("note.txt", "kept"));

    // Opened with another key: refused, the seal's own error kept as the cause.
    const wrongKey = await store.restore(saved.checkpoint, newSealKey().toString("base64"), mkdtempSync(join(tmpdir(), "paddock-restore-"))).catch((e: unknown) => e);
    expect(wrongKey).toBeInstanceOf(CheckpointError);
    expect((wrongKey as CheckpointError).cause).toBeInstanceOf(SealError);
    expect((wrongKey as CheckpointError).message).toBe(((wrongKey as CheckpointError).cause as SealError).message);

    // A store that does not exist: the fact says only that it could not be read.
    const missing = { ...saved.checkpoint, ref: `${runnerObjectStore(ObjectStores.checkpoints, "p9", "r9")}/ws1/s1/1-c1` };
    const unread = await store.restore(missing, newSealKey().toString("base64"), mkdtempSync(join(tmpdir(), "paddock-restore-"))).catch((e: unknown) => e);
    expect(unread).toMatchObject({ name: "CheckpointError", message: "checkpoint could not be read" });
    expect((unread as CheckpointError).cause).toBeInstanceOf(Error);
  });
});
