/**
 * The feed of a list route (`?follow=true`): the current records, a
 * `{"synced":true}` line, then one line per change, as NDJSON, until the
 * client goes, the gateway stops, or the caller loses its access (the
 * StreamGuard cuts the response, so a client never takes a cut feed as
 * complete).
 *
 * The KV watches (updates only) open before the records are read: a change
 * made while the snapshot is read waits in its watch and is written after the
 * snapshot. Applied in order, the lines converge on the current set: each
 * key's latest change is always written last, even when an earlier one
 * re-states what the snapshot already held.
 */
import type { ServerResponse } from "node:http";
import { KvWatchInclude, type KV, type KvWatchEntry } from "@nats-io/kv";
import type { QueuedIterator } from "@nats-io/transport-node";
import { NDJSON } from "@paddock/contracts";
import type { Logger } from "@paddock/logging";
import type { Principal } from "./auth.ts";
import type { Reauthorize, StreamGuard } from "./revocation.ts";
import { drainOrClose } from "../http/http.ts";

/** One KV watch of a feed: which keys, and the line (if any) each change makes. */
export interface FeedSource<Line> {
  readonly kv: KV;
  /** A key filter (`>` by default). */
  readonly key?: string;
  lineOf(entry: KvWatchEntry): Line | undefined | Promise<Line | undefined>;
}

export interface RecordFeed<Line> {
  readonly res: ServerResponse;
  readonly guard: StreamGuard;
  readonly principal: Principal;
  readonly reauthorize: Reauthorize;
  readonly log: Logger;
  readonly sources: ReadonlyArray<FeedSource<Line>>;
  /** The current records, read after the watches opened. */
  snapshot(): Promise<Line[]>;
  readonly synced: Line;
}

/**
 * Serves the feed. Everything that can fail with a typed error (opening the
 * watches, reading the snapshot) happens before the 200 is written.
 */
export async function serveRecordFeed<Line>(feed: RecordFeed<Line>): Promise<void> {
  const { res } = feed;
  const watches: Array<QueuedIterator<KvWatchEntry>> = [];
  const stop = () => {
    for (const w of watches) w.stop();
  };
  try {
    for (const s of feed.sources) watches.push(await s.kv.watch({ key: s.key ?? ">", include: KvWatchInclude.UpdatesOnly }));
    await feed.guard.ready();
    const initial = await feed.snapshot();
    // A client gone while the snapshot was read: its close fired before anyone listened, so nothing would stop the watches.
    if (res.destroyed || res.closed) return;
    res.once("close", stop);
    const stream = { tokenHash: feed.principal.tokenHash, revoke: () => res.destroy() };
    feed.guard.add(stream, feed.principal, feed.reauthorize);
    try {
      res.writeHead(200, { "content-type": NDJSON, "cache-control": "no-store", "x-content-type-options": "nosniff" });
      for (const line of [...initial, feed.synced]) await writeLine(res, line);
      await Promise.all(feed.sources.map((s, i) => pump(res, s, watches[i], feed.log)));
    } finally {
      feed.guard.remove(stream);
      res.off("close", stop);
    }
  } finally {
    stop();
  }
  if (!res.destroyed) res.end();
}

/** Writes each change's line until the watch stops (the response closed, or the gateway stopped). */
async function pump<Line>(res: ServerResponse, source: FeedSource<Line>, watch: QueuedIterator<KvWatchEntry> | undefined, log: Logger): Promise<void> {
  if (!watch) return;
  try {
    for await (const entry of watch) {
      if (res.destroyed) break;
      const line = await source.lineOf(entry);
      if (line !== undefined) await writeLine(res, line);
    }
  } catch (err) {
    // A watch that fails ends the feed: the client reconnects and starts from a fresh snapshot.
    log.warn({ err }, "record feed: a watch ended");
    res.destroy();
  }
}

async function writeLine(res: ServerResponse, line: unknown): Promise<void> {
  if (res.destroyed) return;
  if (!res.write(JSON.stringify(line) + "\n")) await drainOrClose(res);
}
