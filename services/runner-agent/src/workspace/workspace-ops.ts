import { Readable } from "node:stream";
import type { ReadableStream as NodeWebReadableStream } from "node:stream/web";
import { Objm, type ObjectStore } from "@nats-io/obj";
import type { NatsConnection, Subscription } from "@nats-io/transport-node";
import { DESCRIPTOR_RELATIVE, relativeSegments, resolveInside, SealError, sealed, sealKeyFrom, UnsafePathError, unsealed, type ReplaceFile } from "@paddock/archive";
import { serveRpc, type BusMetrics } from "@paddock/bus";
import {
  ConflictError,
  InvalidError,
  NotFoundError,
  ObjectStores,
  TooLargeError,
  transferObjectName,
  transferRef,
  UnavailableError,
  workspaceRpcs,
  type WorkspaceDiffReply,
  type WorkspacePullReply,
  type WorkspacePushReply,
  type HeldSession,
} from "@paddock/contracts";
import type { Logger } from "@paddock/logging";
import { extractArchive, packInside } from "./archive.ts";
import { ArchiveRefusedError, CommandRefusedError, WorkspaceTooLargeError } from "../errors.ts";
import { workspaceDiff } from "./git-diff.ts";
import { serveFileOps, type DataPlaneOfferer } from "./file-ops.ts";
import { serveReposOp } from "./repos-op.ts";
import { serveFileWatch, type FileWatchLimits } from "./file-watch.ts";
import type { SandboxUser } from "../sandbox/backend.ts";

/** Bounds of the workspace operations (push, diff). */
export interface WorkspaceLimits {
  maxEntries: number;
  maxBytes: number;
  diffMaxRepoBytes: number;
  diffMaxBytes: number;
  diffMaxRepos: number;
}

export const defaultWorkspaceLimits: WorkspaceLimits = {
  maxEntries: 100_000,
  maxBytes: 2 * 1024 * 1024 * 1024,
  diffMaxRepoBytes: 256 * 1024,
  diffMaxBytes: 512 * 1024,
  diffMaxRepos: 32,
};

/**
 * A held session as the workspace operations reach it (sessions/ SessionRuntime
 * is one): declared here so that workspace/ never imports sessions/.
 */
export interface HeldWorkspace {
  readonly held: HeldSession;
  /**
   * Runs fn on the workspace after every earlier command of the session, while its sandbox is live; refused otherwise.
   * user: the session's own user where not the runner's (Sandbox.user): what is pushed is given to it, what is pulled
   * is only what it owns, and git diffs as it.
   */
  workspaceTask<T>(fn: (workspace: string, user: SandboxUser | undefined) => Promise<T>): Promise<T>;
  /** After a push: a running watch session reloads; false otherwise. */
  requestReload(): boolean;
}

export interface WorkspaceOpsDeps {
  nc: NatsConnection;
  poolId: string;
  runnerId: string;
  /** The runtime of a session held here. */
  session: (sessionId: string) => HeldWorkspace | undefined;
  /** False while the runner is fenced: it must not act on sessions it may no longer hold. */
  serving: () => boolean;
  /** A file call is the session's activity (the idle policy's input). */
  onActivity?: (sessionId: string) => void;
  limits?: Partial<WorkspaceLimits>;
  /** Bounds of the live file watches (file-watch.ts). */
  watchLimits?: Partial<FileWatchLimits>;
  /** The data plane's offer (file reads' and writes' bytes); absent: they go inline or through the transfer store. */
  offer?: DataPlaneOfferer;
  /** How a written file takes its path's place (replace-file.ts); a rename without it. */
  replaceFile?: ReplaceFile;
  /** The injected clock (file watch leases). */
  now: () => number;
  childPath: string;
  metrics: BusMetrics;
  log: Logger;
}

export interface Target {
  sessionId: string;
  workspaceId: string;
  placementGeneration: number;
}

/**
 * The held session a request names, for the placement generation it was made
 * for; another one (an older placement, or one moved elsewhere) is a
 * conflict, never acted on; a fenced runner answers unavailable. Shared by
 * every request the runner serves for a session (workspace, exec).
 */
export function heldAt<H extends { held: HeldSession }>(find: (sessionId: string) => H | undefined, serving: () => boolean, t: Target): H {
  if (!serving()) throw new UnavailableError("runner is re-registering; retry");
  const runtime = find(t.sessionId);
  if (!runtime || runtime.held.workspaceId !== t.workspaceId) throw new ConflictError("session has no live sandbox on this runner");
  if (runtime.held.placementGeneration !== t.placementGeneration) throw new ConflictError("session is held at another placement generation");
  return runtime;
}

export interface WorkspaceOps {
  stop(): void;
  /** File watches held now. */
  readonly watchCount: number;
}

/**
 * Serves push, pull and diff for the sessions this runner holds. Each
 * request names the placement generation it was made for; another one (an
 * older placement, or one moved elsewhere) is a conflict, never acted on.
 * Archives move through object store `transfers`: a push reads the gateway's
 * object, a pull writes one the gateway then streams out and deletes.
 */
export function serveWorkspaceOps(deps: WorkspaceOpsDeps): WorkspaceOps {
  const limits = { ...defaultWorkspaceLimits, ...deps.limits };
  if (!DESCRIPTOR_RELATIVE) deps.log.warn("no /proc/self/fd: workspace push and pull check paths without holding them, so a sandbox racing them may redirect them");
  const rpcs = workspaceRpcs(deps.poolId, deps.runnerId);
  let store: Promise<ObjectStore> | undefined;
  const transfers = (): Promise<ObjectStore> => {
    store ??= new Objm(deps.nc).open(ObjectStores.transfers).catch((err: unknown) => {
      store = undefined;
      throw err;
    });
    return store;
  };

  const held = (t: Target): HeldWorkspace => heldAt(deps.session, deps.serving, t);

  const opts = { queue: `workspace-${deps.runnerId}`, metrics: deps.metrics, log: deps.log };
  const watches = serveFileWatch({ nc: deps.nc, poolId: deps.poolId, runnerId: deps.runnerId, rpcs, held, now: deps.now, ...(deps.watchLimits ? { limits: deps.watchLimits } : {}), serve: opts, log: deps.log, translate });
  const subs: Subscription[] = [
    ...watches.subs,
    serveRpc(deps.nc, rpcs.push, (req) =>
      translate(async (): Promise<WorkspacePushReply> => {
        const runtime = held(req);
        const segments = relativeSegments(req.path);
        const result = await runtime.workspaceTask(async (workspace, user) => {
          const name = transferObjectName(req.workspaceId, req.sessionId, req.transferId);
          const got = await (await transfers()).get(name);
          if (!got) throw new NotFoundError("transfer");
          // Held by descriptor from here on: a symlink the sandbox swaps in cannot redirect the writes.
          const target = await resolveInside(workspace, segments, { create: true, owner: user });
          const source = unsealed(Readable.fromWeb(got.data as NodeWebReadableStream<Uint8Array>), sealKeyFrom(req.sealKey), transferRef(name));
          let extracted;
          try {
            extracted = await extractArchive(source, target.dir, limits, { owner: user });
          } catch (err) {
            if (err instanceof SealError) throw new InvalidError("archive does not open with its transfer key", { cause: err });
            throw err;
          } finally {
            target.close();
          }
          if (await got.error) throw new InvalidError("archive is corrupt in the transfer store");
          return extracted;
        });
        const reload = runtime.requestReload();
        deps.log.info({ sessionId: req.sessionId, entries: result.entries, bytes: result.bytes, reload }, "workspace pushed");
        return { ...result, reload };
      }),
    opts),
    serveRpc(deps.nc, rpcs.pull, (req) =>
      translate(async (): Promise<WorkspacePullReply> => {
        const runtime = held(req);
        const segments = relativeSegments(req.path);
        return runtime.workspaceTask(async (workspace, user) => {
          const target = await resolveInside(workspace, segments, { create: false });
          try {
            const name = transferObjectName(req.workspaceId, req.sessionId, req.transferId);
            // The reply gives the archive's own size (the client's content-length), counted before sealing.
            let size = 0;
            const archive = Readable.fromWeb(packInside(target, { owner: user }) as NodeWebReadableStream<Uint8Array>);
            const counted = archive.map((chunk: Uint8Array) => {
              size += chunk.byteLength;
              return chunk;
            });
            const body = sealed(counted, sealKeyFrom(req.sealKey), transferRef(name));
            await (await transfers()).put({ name }, Readable.toWeb(body) as unknown as ReadableStream<Uint8Array>);
            return { size };
          } finally {
            target.close();
          }
        });
      }),
    opts),
    serveRpc(deps.nc, rpcs.diff, (req) =>
      translate(async (): Promise<WorkspaceDiffReply> => {
        const runtime = held(req);
        return runtime.workspaceTask((workspace, user) =>
          workspaceDiff(workspace, {
            maxRepoBytes: limits.diffMaxRepoBytes,
            maxBytes: limits.diffMaxBytes,
            maxRepos: limits.diffMaxRepos,
            pathEnv: deps.childPath,
            runAs: user,
          }),
        );
      }),
    opts),
    ...serveFileOps({ nc: deps.nc, rpcs, held: (t) => {
      deps.onActivity?.(t.sessionId);
      return held(t);
    }, transfers, maxBytes: limits.maxBytes, serve: opts, log: deps.log, translate, ...(deps.offer ? { offer: deps.offer } : {}), ...(deps.replaceFile ? { replaceFile: deps.replaceFile } : {}) }),
    serveReposOp({ nc: deps.nc, rpcs, held, bounds: { maxRepos: limits.diffMaxRepos, pathEnv: deps.childPath }, serve: opts, translate }),
  ];
  return {
    stop: () => {
      for (const s of subs) s.unsubscribe();
      watches.stop();
    },
    get watchCount() {
      return watches.count;
    },
  };
}

/** The runner's own errors as the public vocabulary (everything else stays internal, with no detail). */
export async function translate<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    if (err instanceof WorkspaceTooLargeError) throw new TooLargeError(err.message, { cause: err });
    if (err instanceof ArchiveRefusedError) throw new InvalidError(err.message, { cause: err });
    if (err instanceof UnsafePathError) throw err.missing ? new NotFoundError("path", { cause: err }) : new InvalidError(err.message, { cause: err });
    if (err instanceof CommandRefusedError) throw new ConflictError(err.message, { cause: err });
    throw err;
  }
}
