/**
 * Live watches of a held session's workspace (GET /v1/sessions/:id/files/watch;
 * docs/workspace.md, Watching files). The gateway starts one per socket and
 * renews its lease while the socket is open; changes are coalesced per path
 * for a short window, then judged (created, modified, deleted) and published
 * over core NATS on the watch's own subject. Everything is bounded: watches
 * per session, distinct paths pending per watch (past it one batch says
 * overflow), directories per watch. A lapsed lease stops the watch, so a
 * gateway that died leaves nothing running here.
 */
import { lstatSync } from "node:fs";
import type { NatsConnection, Subscription } from "@nats-io/transport-node";
import { relativeSegments, resolveInside } from "@paddock/archive";
import { encoderOf, serveRpc, type BusMetrics } from "@paddock/bus";
import {
  ConflictError,
  FileWatchBatch,
  MAX_WATCH_BATCH,
  MAX_WATCH_PENDING,
  MAX_WATCHES_PER_SESSION,
  NotFoundError,
  watchEventsSubject,
  type FileChange,
  type FileWatchRequest,
  type workspaceRpcs,
} from "@paddock/contracts";
import type { Logger } from "@paddock/logging";
import { openDirInside, watchTree, type RawChange, type TreeWatch } from "./tree-watch.ts";

type Target = Pick<FileWatchRequest, "sessionId" | "workspaceId" | "placementGeneration">;

export interface FileWatchLimits {
  /** How long changes to one path are gathered before they are judged and sent. */
  coalesceMs: number;
  /** Distinct paths pending per watch (MAX_WATCH_PENDING). */
  maxPending: number;
  /** Directories one watch watches (inotify watches). */
  maxDirs: number;
  /** How often leases and held sessions are checked. */
  sweepMs: number;
}

export const defaultFileWatchLimits: FileWatchLimits = { coalesceMs: 50, maxPending: MAX_WATCH_PENDING, maxDirs: 10_000, sweepMs: 1_000 };

export interface FileWatchContext {
  nc: NatsConnection;
  poolId: string;
  runnerId: string;
  rpcs: ReturnType<typeof workspaceRpcs>;
  /** The held session a request names (a conflict for another placement, unavailable while fenced). */
  held: (t: Target) => { workspaceTask<T>(fn: (workspace: string) => Promise<T>): Promise<T> };
  /** The injected clock: leases are judged on it. */
  now: () => number;
  limits?: Partial<FileWatchLimits>;
  serve: { queue: string; metrics: BusMetrics; log: Logger };
  log: Logger;
  translate: <T>(fn: () => Promise<T>) => Promise<T>;
}

interface Watch {
  id: string;
  target: Target;
  workspace: string;
  /** Only this path (a watched file) passes; undefined: everything the tree reports. */
  only: string | undefined;
  expiresAt: number;
  tree: TreeWatch | undefined;
  /** path → whether a `rename` was among its raw events. */
  pending: Map<string, boolean>;
  overflow: boolean;
  timer: NodeJS.Timeout | undefined;
}

export interface FileWatches {
  subs: Subscription[];
  /** Watches held now (tests, metrics). */
  readonly count: number;
  /** Checks every lease and held session now (also run every sweepMs). */
  sweep(): void;
  stop(): void;
}

/** A path's state now, without following a link: what the window's raw events amount to. */
function judge(workspace: string, path: string, sawRename: boolean): FileChange["kind"] {
  const segments = path.split("/");
  const name = segments.pop() as string;
  const parent = openDirInside(workspace, segments);
  if (!parent) return "delete";
  try {
    lstatSync(parent.at(name));
  } catch {
    return "delete";
  } finally {
    parent.close();
  }
  // fs.watch says only "rename" (a name came or went) or "change": a name present after a rename was made (or renamed onto).
  return sawRename ? "create" : "modify";
}

export function serveFileWatch(c: FileWatchContext): FileWatches {
  const limits = { ...defaultFileWatchLimits, ...c.limits };
  const encode = encoderOf(c.nc);
  const watches = new Map<string, Watch>();

  const publish = (w: Watch, changes: FileChange[], overflow: boolean, ended: boolean) => {
    const batch: FileWatchBatch = { watchId: w.id, changes, overflow, ended };
    c.nc.publish(watchEventsSubject(c.poolId, c.runnerId, w.id), encode(FileWatchBatch, batch));
  };

  const flush = (w: Watch) => {
    w.timer = undefined;
    const changes = [...w.pending].map(([path, sawRename]) => ({ path, kind: judge(w.workspace, path, sawRename) }));
    const overflow = w.overflow;
    w.pending.clear();
    w.overflow = false;
    if (changes.length === 0) publish(w, [], overflow, false);
    for (let i = 0; i < changes.length; i += MAX_WATCH_BATCH) publish(w, changes.slice(i, i + MAX_WATCH_BATCH), overflow && i === 0, false);
  };

  const schedule = (w: Watch) => {
    w.timer ??= setTimeout(() => flush(w), limits.coalesceMs);
  };

  const stop = (w: Watch, ended: boolean) => {
    if (!watches.delete(w.id)) return;
    w.tree?.close();
    clearTimeout(w.timer);
    if (ended) {
      if (w.pending.size > 0 || w.overflow) flush(w);
      publish(w, [], false, true);
    }
    c.log.debug({ sessionId: w.target.sessionId, watchId: w.id, ended }, "file watch stopped");
  };

  const observe = (w: Watch, path: string, raw: RawChange) => {
    if (w.only !== undefined && path !== w.only) return;
    if (!w.pending.has(path) && w.pending.size >= limits.maxPending) w.overflow = true;
    else w.pending.set(path, (w.pending.get(path) ?? false) || raw === "rename");
    schedule(w);
  };

  const start = async (req: FileWatchRequest): Promise<void> => {
    const runtime = c.held(req);
    const held = [...watches.values()].filter((w) => w.target.sessionId === req.sessionId).length;
    if (held >= MAX_WATCHES_PER_SESSION) throw new ConflictError(`at most ${MAX_WATCHES_PER_SESSION} watches per session`);
    const segments = relativeSegments(req.path);
    // After the session's earlier commands, while its sandbox is live; the watch itself runs outside the task.
    const { workspace, kind } = await runtime.workspaceTask(async (workspace) => {
      const t = await resolveInside(workspace, segments, { create: false });
      t.close();
      return { workspace, kind: t.kind };
    });
    const path = segments.join("/");
    const w: Watch = {
      id: req.watchId,
      target: { sessionId: req.sessionId, workspaceId: req.workspaceId, placementGeneration: req.placementGeneration },
      workspace,
      only: kind === "file" ? path : undefined,
      expiresAt: c.now() + req.leaseMs,
      tree: undefined,
      pending: new Map(),
      overflow: false,
      timer: undefined,
    };
    watches.set(w.id, w);
    try {
      w.tree = watchTree(workspace, kind === "file" ? segments.slice(0, -1).join("/") : path, {
        maxDirs: limits.maxDirs,
        recursive: kind === "directory",
        onChange: (p, raw) => observe(w, p, raw),
        onOverflow: () => {
          w.overflow = true;
          schedule(w);
        },
        onEnd: () => stop(w, true),
      });
    } catch (err) {
      watches.delete(w.id);
      // Swapped for a link (or removed) between the check and the watch.
      throw new NotFoundError("path", { cause: err });
    }
    c.log.debug({ sessionId: req.sessionId, watchId: w.id }, "file watch started");
  };

  const sweep = () => {
    const t = c.now();
    for (const w of [...watches.values()]) {
      if (t >= w.expiresAt) {
        // Said on the watch's subject too: a gateway that is only slow (not dead) closes its socket rather than wait in silence.
        stop(w, true);
        continue;
      }
      try {
        c.held(w.target);
      } catch {
        // The session ended, moved or the runner is fenced: tell the gateway, which closes the socket.
        stop(w, true);
      }
    }
  };
  const sweeper = setInterval(sweep, limits.sweepMs);
  sweeper.unref();

  const subs = [
    serveRpc(
      c.nc,
      c.rpcs.watch,
      (req) =>
        c.translate(async () => {
          const existing = watches.get(req.watchId);
          if (req.renew) {
            if (!existing || existing.target.sessionId !== req.sessionId) throw new NotFoundError("watch");
            c.held(req);
            existing.expiresAt = Math.max(existing.expiresAt, c.now() + req.leaseMs);
          } else if (!existing) {
            await start(req);
          }
          return { watchId: req.watchId };
        }),
      c.serve,
    ),
    serveRpc(
      c.nc,
      c.rpcs.unwatch,
      (req) =>
        c.translate((): Promise<{ stopped: boolean }> => {
          const w = watches.get(req.watchId);
          if (!w || w.target.sessionId !== req.sessionId) return Promise.resolve({ stopped: false });
          stop(w, false);
          return Promise.resolve({ stopped: true });
        }),
      c.serve,
    ),
  ];
  return {
    subs,
    get count() {
      return watches.size;
    },
    sweep,
    stop: () => {
      clearInterval(sweeper);
      for (const w of [...watches.values()]) stop(w, false);
    },
  };
}
