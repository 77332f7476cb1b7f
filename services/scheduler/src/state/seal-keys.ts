/**
 * Keys of sealed checkpoints and environment snapshots (KV `seal-keys`, the
 * scheduler's alone). A runner reports the key of an object it stored on the
 * fact that names it; the key is kept here, never on the record (records are
 * answered to clients and fed to the audit recorder), and handed only to the
 * runner a start command places the session on.
 */
import { createHash } from "node:crypto";
import type { KV } from "@nats-io/kv";
import { z } from "zod";
import { decodeJson, type Encoder } from "@paddock/bus";
import { EpochMs, SealKey } from "@paddock/contracts";

export const SealKeyRecord = z
  .object({
    /** The object the key opens (`<store>/<name>`). */
    ref: z.string().min(1).max(512),
    key: SealKey,
    /** When it was stored: garbage collection leaves young keys alone. */
    storedAt: EpochMs,
  })
  .strict();
export type SealKeyRecord = z.infer<typeof SealKeyRecord>;

/** The KV key of an object ref (refs hold `/`, which KV keys allow but tokens of other tools may not). */
export function sealKeyKey(ref: string): string {
  return createHash("sha256").update(ref, "utf8").digest("hex");
}

export class SealKeys {
  constructor(
    private readonly kv: KV,
    private readonly now: () => number,
    /** The bus's encoder (encoderOf): it checks what is stored as the bus's outgoing validation says. */
    private readonly encode: Encoder,
  ) {}

  /** Stores the key of ref; the same key again is a no-op (a redelivered fact). */
  async put(ref: string, key: SealKey): Promise<void> {
    await this.kv.put(sealKeyKey(ref), this.encode(SealKeyRecord, { ref, key, storedAt: this.now() }));
  }

  /** The key of ref, or undefined when none is stored (or the record is not one). */
  async get(ref: string): Promise<SealKey | undefined> {
    const entry = await this.kv.get(sealKeyKey(ref));
    if (!entry || entry.operation !== "PUT") return undefined;
    const decoded = decodeJson(SealKeyRecord, entry.value);
    return decoded.ok && decoded.value.ref === ref ? decoded.value.key : undefined;
  }

  async delete(ref: string): Promise<void> {
    await this.kv.purge(sealKeyKey(ref));
  }

  /** Every stored key record (garbage collection). */
  async *all(): AsyncGenerator<SealKeyRecord> {
    for await (const k of await this.kv.keys()) {
      const entry = await this.kv.get(k);
      if (!entry || entry.operation !== "PUT") continue;
      const decoded = decodeJson(SealKeyRecord, entry.value);
      if (decoded.ok) yield decoded.value;
    }
  }
}
