/**
 * Live updates for every page: follows of the API's NDJSON feeds
 * (`GET /v1/events?follow=true`, AuditEntry lines; the record feeds of
 * runners and tokens in feeds.ts), reconnected with backoff when they drop,
 * ended by an AbortSignal (a page's unmount).
 *
 * Every event line carries its stream sequence: a reconnect resumes right
 * after the last line seen, so nothing is lost or repeated. The first
 * connection starts where the page asks: `now` (pages that only need to
 * know that something changed: they read the current state themselves),
 * a time (the events page's window) or the beginning (one session's events).
 */
import { AuditEntry, HttpApi, NDJSON, type ResourceKind } from "@paddock/contracts";
import { ApiError, ndjson, send } from "./api.ts";

export type FollowState = "connecting" | "live" | "retrying" | "stopped";

export interface ReconnectOptions {
  readonly signal: AbortSignal;
  /** Called on every change of the connection's state; `error` when it dropped or was refused. */
  readonly onState?: (state: FollowState, error?: ApiError) => void;
  /** First retry delay; doubles up to maxDelayMs (default 500 ms .. 15 s). */
  readonly minDelayMs?: number;
  readonly maxDelayMs?: number;
}

export interface FollowOptions extends ReconnectOptions {
  /** Only this session's events. */
  readonly sessionId?: string;
  /** Where the first connection starts: only what happens next (default), at a time (epoch ms), or everything retained. */
  readonly from?: "now" | "all" | { readonly startTime: number };
}

export interface EventMeta {
  /** Happened after the follow first opened (not part of the history it started with). */
  readonly live: boolean;
}

/** Slack for the second-resolution `Date` header and the recorder's lag. */
const SLACK_MS = 1000;

/** The delay before retry `attempt` (0-based): doubling from min to max, with up to 25% jitter. */
export function backoffDelay(attempt: number, minMs = 500, maxMs = 15_000, random: () => number = Math.random): number {
  const base = Math.min(maxMs, minMs * 2 ** Math.min(attempt, 30));
  return Math.round(base * (0.75 + 0.25 * random()));
}

/** The time a follow was opened, by the server's clock when it said (Date header), else ours. */
function openedAt(res: Response): number {
  const date = Date.parse(res.headers.get("date") ?? "");
  return (Number.isFinite(date) ? date : Date.now()) - SLACK_MS;
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal.removeEventListener("abort", done);
      resolve();
    }
    signal.addEventListener("abort", done, { once: true });
  });
}

/**
 * Runs `connect` (one connection: resolves when the server ends it, throws
 * when it drops or is refused) until `signal` aborts, with backoff between
 * attempts. Errors that retrying cannot fix (400, 401, 403, 404) stop it and
 * are reported through onState("stopped", error). `onOpen` says the
 * connection is live (reset the backoff).
 */
export async function reconnecting(connect: (onOpen: () => void) => Promise<void>, opts: ReconnectOptions): Promise<void> {
  const { signal } = opts;
  let attempt = 0;
  opts.onState?.("connecting");
  while (!signal.aborted) {
    try {
      await connect(() => {
        attempt = 0;
        opts.onState?.("live");
      });
      // The gateway ended the stream (it stopped, or cut it): connect again.
      if (!signal.aborted) opts.onState?.("retrying");
    } catch (err) {
      if (signal.aborted) break;
      const apiErr = err instanceof ApiError ? err : new ApiError(0, "unavailable", "the live stream dropped");
      if ([400, 401, 403, 404].includes(apiErr.status)) {
        opts.onState?.("stopped", apiErr);
        return;
      }
      opts.onState?.("retrying", apiErr);
    }
    if (signal.aborted) break;
    await sleep(backoffDelay(attempt++, opts.minDelayMs, opts.maxDelayMs), signal);
  }
  opts.onState?.("stopped");
}

/** Follows the audit stream until `signal` aborts; a reconnect resumes after the last event delivered. */
export async function followEvents(onEvent: (event: AuditEntry, meta: EventMeta) => void, opts: FollowOptions): Promise<void> {
  const { signal } = opts;
  const from = opts.from ?? "now";
  let cursor: number | undefined;
  let liveSince: number | undefined;
  const start = () => (cursor !== undefined ? { since: cursor } : from === "now" ? { since: "now" } : from === "all" ? {} : { startTime: from.startTime });
  await reconnecting(async (onOpen) => {
    const res = await send(HttpApi.listEvents, { query: { follow: true, ...start(), ...(opts.sessionId ? { sessionId: opts.sessionId } : {}) }, signal }, { accept: NDJSON });
    liveSince ??= openedAt(res);
    onOpen();
    for await (const line of ndjson(res)) {
      const parsed = AuditEntry.safeParse(line);
      if (!parsed.success) continue;
      cursor = parsed.data.seq;
      onEvent(parsed.data, { live: parsed.data.at >= liveSince });
    }
  }, opts);
}

/** Calls `fn` once, `ms` after the last of a burst of calls; `cancel` drops a pending call. */
export function debounce(fn: () => void, ms = 150): { (): void; cancel(): void } {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const run = () => {
    if (timer !== undefined) clearTimeout(timer);
    timer = setTimeout(() => {
      timer = undefined;
      fn();
    }, ms);
  };
  run.cancel = () => {
    if (timer !== undefined) clearTimeout(timer);
    timer = undefined;
  };
  return run;
}

/**
 * The usual page wiring: re-run a kind's refresh (debounced) whenever an
 * event about that resource kind arrives (the follow starts at `now`: the
 * page reads the current state itself), and every refresh once each time the
 * follow reconnects (it resumes after the last event it saw; when it saw
 * none, a change may have happened while it was down). Returns the unmount.
 */
export function liveRefresh(refreshers: Partial<Record<ResourceKind, () => void>>, opts: { onState?: FollowOptions["onState"]; debounceMs?: number } = {}): () => void {
  const ctl = new AbortController();
  const later = new Map<string, ReturnType<typeof debounce>>();
  for (const [kind, fn] of Object.entries(refreshers))
    later.set(
      kind,
      debounce(() => {
        if (!ctl.signal.aborted) fn();
      }, opts.debounceMs ?? 150),
    );
  let connectedOnce = false;
  void followEvents((e) => later.get(e.resource.kind)?.(), {
    signal: ctl.signal,
    onState: (state, error) => {
      if (state === "live" && connectedOnce) for (const run of later.values()) run();
      if (state === "live") connectedOnce = true;
      opts.onState?.(state, error);
    },
  });
  return () => {
    ctl.abort();
    for (const run of later.values()) run.cancel();
  };
}
