import { jetstreamManager } from "@nats-io/jetstream";
import type { KV } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/transport-node";
import type { z } from "zod";
import { kvStreamName } from "@paddock/contracts";
import { decodeJson } from "@paddock/bus";
import type { Logger } from "@paddock/logging";
import type { Versioned } from "./store.ts";

/**
 * An in-memory, eventually consistent view of one KV bucket, fed by its watch.
 * Reads that must be exact (any compare-and-set) go to KV; the view serves
 * listings and placement candidates. Local writes are applied at once so a
 * replica reads its own writes.
 */
export class KvView<S extends z.ZodType> {
  private readonly entries = new Map<string, Versioned<z.infer<S>>>();
  private stopWatch: (() => void) | undefined;
  private onChange: ((key: string) => void) | undefined;

  /** `onEntry` sees every change of the held value (before `onChange`): secondary indexes hang off it. */
  constructor(
    private readonly schema: S,
    private readonly onEntry?: (key: string, prev: z.infer<S> | undefined, next: z.infer<S> | undefined) => void,
  ) {}

  /** Resolves once the view holds every key that existed when it started. */
  async start(nc: NatsConnection, kv: KV, bucket: string, log: Logger, onChange?: (key: string) => void): Promise<void> {
    this.onChange = onChange;
    const jsm = await jetstreamManager(nc);
    const stored = (await jsm.streams.info(kvStreamName(bucket))).state.messages;
    const watch = await kv.watch();
    this.stopWatch = () => watch.stop();
    let markReady!: () => void;
    const ready = new Promise<void>((r) => (markReady = r));
    if (stored === 0) markReady();
    void (async () => {
      for await (const entry of watch) {
        // Most revisions a replica sees are its own writes, already applied:
        // skip decoding (and validating) them a second time.
        const held = this.entries.get(entry.key);
        if (held && held.revision >= entry.revision) {
          if (entry.isUpdate || entry.delta === 0) markReady();
          continue;
        }
        if (entry.operation === "PUT") {
          const decoded = decodeJson(this.schema, entry.value);
          if (decoded.ok) this.apply(entry.key, { value: decoded.value, revision: entry.revision });
          else log.warn({ bucket, key: entry.key }, "unreadable record skipped");
        } else {
          this.remove(entry.key, entry.revision);
        }
        // The watch delivers the initial values first (isUpdate false, delta
        // counting down to 0), then live updates.
        if (entry.isUpdate || entry.delta === 0) markReady();
      }
    })().catch((err: unknown) => log.error({ err, bucket }, "watch ended"));
    await ready;
  }

  stop(): void {
    this.stopWatch?.();
  }

  /** Applies a value unless the view already holds a newer revision. */
  apply(key: string, v: Versioned<z.infer<S>>): void {
    const held = this.entries.get(key);
    if (held && held.revision >= v.revision) return;
    this.entries.set(key, v);
    this.onEntry?.(key, held?.value, v.value);
    this.onChange?.(key);
  }

  private remove(key: string, revision: number): void {
    const held = this.entries.get(key);
    if (held && held.revision > revision) return;
    this.entries.delete(key);
    if (held) this.onEntry?.(key, held.value, undefined);
  }

  get(key: string): Versioned<z.infer<S>> | undefined {
    return this.entries.get(key);
  }

  values(): IterableIterator<Versioned<z.infer<S>>> {
    return this.entries.values();
  }

  get size(): number {
    return this.entries.size;
  }
}
