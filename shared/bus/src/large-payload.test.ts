/**
 * Messages larger than one socket read arrive whole and in order, with and
 * without headers, and (the nats-core patch's point, patches/) a payload
 * gathered across reads is one array of exactly its size: no copy of a
 * doubling buffer, nothing left over to collect.
 */
import { randomBytes } from "node:crypto";
import { headers } from "@nats-io/transport-node";
import { describe, expect, it } from "vitest";
import { useNatsServer } from "@paddock/testing/vitest";

const nats = useNatsServer();

describe("large payloads", () => {
  it("arrive byte for byte across socket reads, each in an array of its own size", async () => {
    const sizes = [0, 1, 65_535, 65_537, 1024 * 1024 + 7, 3 * 1024 * 1024];
    const sent = sizes.flatMap((n) => [randomBytes(n), randomBytes(n)]);
    const got: Array<{ data: Uint8Array; header: string | undefined }> = [];
    const done = new Promise<void>((resolve) => {
      nats.nc.subscribe("large.payload", {
        callback: (_err, msg) => {
          got.push({ data: msg.data, header: msg.headers?.get("n") });
          if (got.length === sent.length) resolve();
        },
      });
    });
    await nats.nc.flush();
    sent.forEach((bytes, i) => {
      // Every other message carries headers: its payload follows them in the same array.
      const h = headers();
      h.set("n", String(i));
      nats.nc.publish("large.payload", bytes, i % 2 === 1 ? { headers: h } : {});
    });
    await done;
    got.forEach((g, i) => {
      expect(Buffer.from(g.data).equals(sent[i] as Buffer)).toBe(true);
      expect(g.header).toBe(i % 2 === 1 ? String(i) : undefined);
    });
    // The 3 MiB message without headers: many reads' bytes in one array of exactly its size.
    const big = got[sent.length - 2]?.data as Uint8Array;
    expect(big.byteLength).toBe(3 * 1024 * 1024);
    expect(big.buffer.byteLength).toBe(3 * 1024 * 1024);
  });
});
