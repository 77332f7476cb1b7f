/**
 * Live updates for every page: one follow of the audit stream
 * (`GET /v1/events?follow=true`, NDJSON of AuditEvent), reconnected with
 * backoff when it drops, ended by an AbortSignal (a page's unmount).
 *
 * A follow replays the stream from `since` (0: all of it) before going live,
 * and its lines carry no stream sequence, so a reconnect cannot resume at a
 * cursor. Each event is therefore marked `live` when it happened no earlier
 * than the follow was opened (by the gateway's clock: the answer's `Date`
 * header, less a second of slack); pages that only need "something changed"
 * ask for live events alone (the default), the events page takes history too.
 */
import { AuditEvent, HttpApi, NDJSON, type ResourceKind } from "@paddock/contracts";
import { ApiError, ndjson, send } from "./api.ts";

export type FollowState = "connecting" | "live" | "retrying" | "stopped";

export interface FollowOptions {
  readonly signal: AbortSignal;
  /** Only this session's events. */
  readonly sessionId?: string;
  /** Deliver the replayed history too (default: live events only). */
  readonly history?: boolean;
  /** Called on every change of the connection's state; `error` when it dropped or was refused. */
  readonly onState?: (state: FollowState, error?: ApiError) => void;
  /** First retry delay; doubles up to maxDelayMs (default 500 ms .. 15 s). */
  readonly minDelayMs?: number;
  readonly maxDelayMs?: number;
}

export interface EventMeta {
  /** Happened after the follow (re)connected, not part of the replay. */
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
 * Follows the audit stream until `signal` aborts, reconnecting with backoff.
 * Errors that retrying cannot fix (401, 403, 404, 400) stop the follow and
 * are reported through onState("stopped", error).
 */
export async function followEvents(onEvent: (event: AuditEvent, meta: EventMeta) => void, opts: FollowOptions): Promise<void> {
  const { signal } = opts;
  let attempt = 0;
  opts.onState?.("connecting");
  while (!signal.aborted) {
    try {
      const res = await send(HttpApi.listEvents, { query: { follow: true, ...(opts.sessionId ? { sessionId: opts.sessionId } : {}) }, signal }, { accept: NDJSON });
      const since = openedAt(res);
      opts.onState?.("live");
      attempt = 0;
      for await (const line of ndjson(res)) {
        const parsed = AuditEvent.safeParse(line);
        if (!parsed.success) continue;
        const live = parsed.data.at >= since;
        if (live || opts.history) onEvent(parsed.data, { live });
      }
      // The gateway ended the stream (it stopped, or cut it): connect again.
      if (!signal.aborted) opts.onState?.("retrying");
    } catch (err) {
      if (signal.aborted) break;
      const apiErr = err instanceof ApiError ? err : new ApiError(0, "unavailable", "the event stream dropped");
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
 * The usual page wiring: re-run a kind's refresh (debounced) whenever a live
 * event about that resource kind arrives, and every refresh once each time
 * the follow reconnects (anything may have changed while it was down).
 * Returns the unmount.
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
