/**
 * The record feeds of list routes (`GET /v1/runners?follow=true`,
 * `GET /v1/tokens?follow=true`): each connection sends every current record,
 * a `synced` line, then one line per change. A connection's records replace
 * the page's set only once it is synced, so a reconnect never shows a half
 * list; changes after that are applied one by one.
 */
import type { z } from "zod";
import { HttpApi, NDJSON, RunnerFeedLine, TokenFeedLine, type HttpRoute, type Runner, type TokenInfo } from "@paddock/contracts";
import { ndjson, send } from "./api.ts";
import { debounce, reconnecting, type ReconnectOptions } from "./live.ts";

export interface RecordFeed<V, Line> {
  readonly route: HttpRoute;
  readonly line: z.ZodType<Line>;
  /** Applies a line that is not `synced` to the set (keyed by the feed's own key). */
  apply(records: Map<string, V>, line: Line): void;
}

/**
 * Follows a feed until `opts.signal` aborts; `onChange` gets the current set
 * after the first sync and after each burst of changes (debounced: a fleet's
 * lease renewals arrive in bursts).
 */
export function followRecords<V, Line>(feed: RecordFeed<V, Line>, onChange: (records: ReadonlyMap<string, V>) => void, opts: ReconnectOptions & { readonly debounceMs?: number }): Promise<void> {
  let current: Map<string, V> | undefined;
  const changed = debounce(() => {
    if (current && !opts.signal.aborted) onChange(current);
  }, opts.debounceMs ?? 50);
  opts.signal.addEventListener("abort", () => changed.cancel(), { once: true });
  return reconnecting(async (onOpen) => {
    const res = await send(feed.route, { query: { follow: true }, signal: opts.signal }, { accept: NDJSON });
    onOpen();
    let building: Map<string, V> | undefined = new Map();
    for await (const raw of ndjson(res)) {
      const parsed = feed.line.safeParse(raw);
      if (!parsed.success) continue;
      if ((parsed.data as { synced?: unknown }).synced === true) {
        current = building ?? current;
        building = undefined;
      } else {
        const target = building ?? current;
        if (target) feed.apply(target, parsed.data);
      }
      if (!building) changed();
    }
  }, opts);
}

const runnerKey = (r: { poolId: string; id: string }) => `${r.poolId}.${r.id}`;

export const runnersFeed: RecordFeed<Runner, RunnerFeedLine> = {
  route: HttpApi.listRunners,
  line: RunnerFeedLine,
  apply(records, line) {
    if ("runner" in line) records.set(runnerKey(line.runner), line.runner);
    else if ("removed" in line) records.delete(runnerKey(line.removed));
    else if ("seen" in line) {
      const r = records.get(runnerKey(line.seen));
      if (r && line.seen.at > r.lastSeenAt) records.set(runnerKey(r), { ...r, lastSeenAt: line.seen.at });
    }
  },
};

export const tokensFeed: RecordFeed<TokenInfo, TokenFeedLine> = {
  route: HttpApi.listTokens,
  line: TokenFeedLine,
  apply(records, line) {
    if ("token" in line) records.set(line.token.id, line.token);
    else if ("removed" in line) records.delete(line.removed.id);
  },
};
