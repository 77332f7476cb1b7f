import { z } from "zod";
import { ErrorBody } from "./errors.ts";
import { DataPlaneOffer, TunnelOpenReply, TunnelOpenRequest } from "./ports.ts";
import { Generation, Id } from "./ids.ts";
import type { Rpc } from "./rpc.ts";
import { SealKey } from "./session.ts";

/**
 * Workspace transfer between the gateway and the runner that holds a session
 * (issue 5, item 7). Request/reply on `paddock.workspace.<pool>.<runner>.<op>`
 * (not under `paddock.runner.>`: that is the RUNNER stream, which would store
 * a request and answer it with a publish ack). Archive bytes never travel in
 * a message: they go through object store `transfers` in chunks, under
 * `transferObjectName(...)`, and whoever created the object deletes it.
 */

/** Longest `?path=` accepted. */
export const MAX_WORKSPACE_PATH = 1024;

/**
 * A workspace-relative path: "" (or ".") is the workspace itself. No leading
 * `/`, no `..` segment, no backslash or NUL. Checked again by the runner, which
 * also refuses a path through a symlink.
 */
export const WorkspacePath = z
  .string()
  .max(MAX_WORKSPACE_PATH)
  .refine((p) => !p.startsWith("/"), "must be relative to the workspace")
  .refine((p) => !p.split("/").includes(".."), "must not contain ..")
  .refine((p) => !/[\\\0]/.test(p), "must not contain a backslash or NUL");
export type WorkspacePath = z.infer<typeof WorkspacePath>;

/** Which placement of which session an operation is for; the runner refuses a generation it does not hold. */
const Target = {
  sessionId: Id,
  workspaceId: Id,
  placementGeneration: Generation.min(1),
};

/**
 * The transfer's archive is sealed (`@paddock/archive` sealed.ts) under this
 * key for the object `transfers/<transferObjectName>`: the transfers store is
 * shared by every runner, the request subject only by the one runner it names.
 * A secret: never logged.
 */
const TransferKey = { sealKey: SealKey };

export const WorkspacePushRequest = z
  .object({ ...Target, path: WorkspacePath, transferId: Id, ...TransferKey })
  .strict();
export type WorkspacePushRequest = z.infer<typeof WorkspacePushRequest>;

export const WorkspacePushReply = z
  .object({
    entries: z.number().int().nonnegative(),
    /** Uncompressed file bytes written. */
    bytes: z.number().int().nonnegative(),
    /** True when the session is a watch session and its reload was requested. */
    reload: z.boolean(),
  })
  .strict();
export type WorkspacePushReply = z.infer<typeof WorkspacePushReply>;

export const WorkspacePullRequest = z
  .object({ ...Target, path: WorkspacePath, transferId: Id, ...TransferKey })
  .strict();
export type WorkspacePullRequest = z.infer<typeof WorkspacePullRequest>;

export const WorkspacePullReply = z
  .object({
    /** Size of the gzipped tar (before sealing) stored under the transfer's object name. */
    size: z.number().int().nonnegative(),
  })
  .strict();
export type WorkspacePullReply = z.infer<typeof WorkspacePullReply>;

export const WorkspaceDiffRequest = z.object(Target).strict();
export type WorkspaceDiffRequest = z.infer<typeof WorkspaceDiffRequest>;

export const RepoDiff = z
  .object({
    /** The repository's directory, relative to the workspace ("." for the workspace itself). */
    path: z.string().max(MAX_WORKSPACE_PATH),
    /** `git diff HEAD` output, cut at the runner's bounds. */
    diff: z.string(),
    truncated: z.boolean(),
    /** Why there is no diff (no commit yet, git failed); absent when the diff is complete or cut. */
    error: z.string().max(512).optional(),
  })
  .strict();
export type RepoDiff = z.infer<typeof RepoDiff>;

/** Also the body of `GET /v1/sessions/:id/diff`. */
export const WorkspaceDiffReply = z
  .object({
    repos: z.array(RepoDiff).max(256),
    /** True when repositories were left out (too many, or the total bound was reached). */
    truncated: z.boolean(),
  })
  .strict();
export type WorkspaceDiffReply = z.infer<typeof WorkspaceDiffReply>;

/**
 * One file's bytes (GET /v1/sessions/:id/files): the runner stores the file,
 * sealed, under the transfer's object name, as a pull does its archive.
 */
/**
 * A byte range of an HTTP `Range: bytes=` header, before the file's size is
 * known: `first-[last]` (both inclusive), or the last `suffix` bytes.
 */
export const ByteRange = z.union([
  z.object({ first: z.number().int().nonnegative(), last: z.number().int().nonnegative().optional() }).strict(),
  z.object({ suffix: z.number().int().positive() }).strict(),
]);
export type ByteRange = z.infer<typeof ByteRange>;

/**
 * The most bytes of one file that cross the bus inside the request or reply
 * itself (raw, after its JSON: the read and write rpcs are withBytes) rather
 * than through a `transfers` object: the object's chunked publishes and
 * ordered read cost tens of ms, one message a few. The gateway uses less when
 * the server's max_payload is smaller (inlineBytesFor).
 */
export const MAX_INLINE_FILE_BYTES = 2 * 1024 * 1024;
/** Room in a message for everything but the inline bytes (JSON fields, headers). */
const INLINE_MESSAGE_SLACK = 16 * 1024;

/** How many bytes of a file fit inline under a server's max_payload (0: none). */
export function inlineBytesFor(maxPayload: number): number {
  return Math.max(0, Math.min(MAX_INLINE_FILE_BYTES, maxPayload - INLINE_MESSAGE_SLACK));
}

export const FileReadRequest = z
  .object({
    ...Target,
    path: WorkspacePath,
    transferId: Id,
    ...TransferKey,
    range: ByteRange.optional(),
    /** When the bytes to answer are at most this many, they come back inline (`FileReadReply.inline`) and no object is stored. */
    inlineMaxBytes: z.number().int().nonnegative().max(MAX_INLINE_FILE_BYTES).optional(),
    /** `data`: bytes past inlineMaxBytes come on the runner's data plane when it has one (the reply's `data`), not as an object. */
    via: z.enum(["bus", "data"]).optional(),
  })
  .strict();
export type FileReadRequest = z.infer<typeof FileReadRequest>;
export const FileReadReply = z
  .object({
    /** The whole file's size. */
    size: z.number().int().nonnegative(),
    /** The bytes the object holds once unsealed (inclusive; end < start for none): the whole file, or the range asked for. */
    start: z.number().int().nonnegative(),
    end: z.number().int().min(-1),
    /** True when the range asked for starts past the end of the file (nothing was stored). */
    unsatisfiable: z.boolean(),
    /** True when the bytes themselves follow the reply (they fit the request's inlineMaxBytes): then no object was stored. */
    inline: z.boolean().optional(),
    /** Where the bytes wait (decision 0052): dial, write the ticket, read them to the end; then no object was stored. */
    data: DataPlaneOffer.optional(),
  })
  .strict();
export type FileReadReply = z.infer<typeof FileReadReply>;

/** How deep a listing may go, and how many entries it answers at most (then `truncated`). */
export const MAX_LIST_DEPTH = 64;
export const MAX_LIST_ENTRIES = 10_000;

export const FileListRequest = z.object({ ...Target, path: WorkspacePath, depth: z.number().int().min(1).max(MAX_LIST_DEPTH) }).strict();
export type FileListRequest = z.infer<typeof FileListRequest>;
export const FileType = z.enum(["file", "dir", "symlink"]);
export const FileEntry = z
  .object({
    /** Relative to the workspace. */
    path: z.string().max(MAX_WORKSPACE_PATH * 2),
    type: FileType,
    /** Bytes (a symlink: its target's length). */
    size: z.number().int().nonnegative(),
    /** Permission bits (e.g. 0o644 = 420). */
    mode: z.number().int().min(0).max(0o7777),
    /** Last modification, ms since the epoch. */
    mtime: z.number().int(),
  })
  .strict();
export type FileEntry = z.infer<typeof FileEntry>;
/** Also the body of `GET /v1/sessions/:id/files/list`: entries in name order, depth first. */
export const FileList = z
  .object({
    entries: z.array(FileEntry).max(MAX_LIST_ENTRIES),
    /** True when entries were left out (past MAX_LIST_ENTRIES). */
    truncated: z.boolean(),
  })
  .strict();
export type FileList = z.infer<typeof FileList>;

/**
 * A listing as the runner answers it on the bus: one array per field of
 * FileEntry, index by index. Checking five arrays of primitives costs a
 * fraction of checking 10,000 objects (each end checks what crosses the
 * bus); the gateway answers the FileList it stands for (`fileListOf`).
 */
export const FileListColumns = z
  .object({
    paths: z.array(FileEntry.shape.path).max(MAX_LIST_ENTRIES),
    types: z.array(FileType).max(MAX_LIST_ENTRIES),
    sizes: z.array(FileEntry.shape.size).max(MAX_LIST_ENTRIES),
    modes: z.array(FileEntry.shape.mode).max(MAX_LIST_ENTRIES),
    mtimes: z.array(FileEntry.shape.mtime).max(MAX_LIST_ENTRIES),
    truncated: z.boolean(),
  })
  .strict()
  .refine((c) => [c.types, c.sizes, c.modes, c.mtimes].every((a) => a.length === c.paths.length), "every column has one value per entry");
export type FileListColumns = z.infer<typeof FileListColumns>;

export function fileListColumns(list: FileList): FileListColumns {
  const e = list.entries;
  return { paths: e.map((x) => x.path), types: e.map((x) => x.type), sizes: e.map((x) => x.size), modes: e.map((x) => x.mode), mtimes: e.map((x) => x.mtime), truncated: list.truncated };
}

export function fileListOf(c: FileListColumns): FileList {
  return {
    entries: c.paths.map((path, i) => ({ path, type: c.types[i] as FileEntry["type"], size: c.sizes[i] as number, mode: c.modes[i] as number, mtime: c.mtimes[i] as number })),
    truncated: c.truncated,
  };
}

/** One file written whole from a transfer object (PUT /v1/sessions/:id/files): parents made, mode set, renamed over what was there. */
export const FileWriteRequest = z
  .object({
    ...Target,
    path: WorkspacePath,
    mode: z.number().int().min(0).max(0o7777),
    /** The bytes through a transfer object (sealed under sealKey)… */
    transferId: Id.optional(),
    sealKey: SealKey.optional(),
    /** …or inline: the bytes follow the request (a file that fits one message)… */
    inline: z.literal(true).optional(),
    /** …or on the runner's data plane: exactly `size` bytes, then the writer's half-close (see FileWriteOutcome). */
    data: z.object({ size: z.number().int().nonnegative() }).strict().optional(),
  })
  .strict()
  .refine(
    (r) => [r.inline === true, r.transferId !== undefined && r.sealKey !== undefined, r.data !== undefined].filter(Boolean).length === 1 && (r.transferId === undefined) === (r.sealKey === undefined),
    "one of: inline bytes, a transfer object with its key, or the data plane",
  );
export type FileWriteRequest = z.infer<typeof FileWriteRequest>;
/** Also the body of `PUT /v1/sessions/:id/files`. */
export const FileWriteReply = z.object({ path: z.string().max(MAX_WORKSPACE_PATH), size: z.number().int().nonnegative() }).strict();
export type FileWriteReply = z.infer<typeof FileWriteReply>;
/** A data-plane write's answer: where to send the bytes (the write's own result comes on that connection); null when the runner has no data plane (nothing was started). */
export const FileWriteOffer = z.object({ data: DataPlaneOffer.nullable() }).strict();
export type FileWriteOffer = z.infer<typeof FileWriteOffer>;
export const FileWriteAnswer = z.union([FileWriteReply, FileWriteOffer]);
/**
 * What the runner sends back on a data-plane write's connection once the
 * writer half-closed it: the write's result, or why it failed (nothing of the
 * file is left then), as one JSON text, then its own end.
 */
export const FileWriteOutcome = z.discriminatedUnion("ok", [z.object({ ok: z.literal(true), result: FileWriteReply }).strict(), z.object({ ok: z.literal(false), error: ErrorBody }).strict()]);
export type FileWriteOutcome = z.infer<typeof FileWriteOutcome>;
/** The longest a data-plane write's outcome may be. */
export const FILE_WRITE_OUTCOME_MAX_BYTES = 16 * 1024;

export const FileDeleteRequest = z.object({ ...Target, path: WorkspacePath, recursive: z.boolean() }).strict();
export type FileDeleteRequest = z.infer<typeof FileDeleteRequest>;
/** Also the body of `DELETE /v1/sessions/:id/files`. */
export const FileDeleteReply = z.object({ path: z.string().max(MAX_WORKSPACE_PATH) }).strict();
export type FileDeleteReply = z.infer<typeof FileDeleteReply>;

/** The repositories of a session's workspace (GET /v1/sessions/:id/repos). */
export const WorkspaceReposRequest = z.object(Target).strict();
export type WorkspaceReposRequest = z.infer<typeof WorkspaceReposRequest>;
export const RepoStatus = z
  .object({
    /** The repository's directory, relative to the workspace ("." for the workspace itself). */
    path: z.string().max(MAX_WORKSPACE_PATH),
    /** The branch HEAD is on; null when HEAD is detached (a tag or a commit was checked out) or unreadable. */
    branch: z.string().max(256).nullable(),
    /** The commit HEAD names; null before the first commit. */
    head: z.string().regex(/^(?:[0-9a-f]{40}|[0-9a-f]{64})$/).nullable(),
    /** Changes to tracked files, staged or not, or untracked files not ignored. */
    dirty: z.boolean(),
    /** Why the state is incomplete (git failed); absent when it is whole. */
    error: z.string().max(512).optional(),
  })
  .strict();
export type RepoStatus = z.infer<typeof RepoStatus>;
/** Also the body of `GET /v1/sessions/:id/repos`. */
export const WorkspaceReposReply = z
  .object({
    repos: z.array(RepoStatus).max(256),
    /** True when repositories were left out (past the runner's bound). */
    truncated: z.boolean(),
  })
  .strict();
export type WorkspaceReposReply = z.infer<typeof WorkspaceReposReply>;

/**
 * A live watch of a workspace path (GET /v1/sessions/:id/files/watch). The
 * gateway asks the runner holding the session to start one (`watch`), then
 * renews it (`watch` with renew: true) every lease/3 while its socket is
 * open; the runner stops a watch whose lease lapsed (a gateway that died
 * leaves nothing behind) and one asked to (`unwatch`). Change batches go out
 * over core NATS (never stored: a watch is live only) on
 * `watchEventsSubject(pool, runner, watchId)`.
 */
export const FILE_WATCH_LEASE_MS = 15_000;
/** Watches one session may have at once on its runner; more is `conflict`. */
export const MAX_WATCHES_PER_SESSION = 16;
/** Events (distinct paths) one watch holds before a batch goes out; past it the rest is dropped and the batch says overflow. */
export const MAX_WATCH_PENDING = 1_000;
/** Events per batch message (a batch of long paths still fits a NATS message). */
export const MAX_WATCH_BATCH = 256;

export const FileWatchRequest = z
  .object({
    ...Target,
    /** Chosen by the gateway (one per socket); names the events subject. */
    watchId: Id,
    path: WorkspacePath,
    /** Renew an existing watch: not_found when the runner no longer holds it (its lease lapsed, the runner restarted). */
    renew: z.boolean(),
    leaseMs: z.number().int().min(1_000).max(120_000),
  })
  .strict();
export type FileWatchRequest = z.infer<typeof FileWatchRequest>;
export const FileWatchReply = z.object({ watchId: Id }).strict();
export type FileWatchReply = z.infer<typeof FileWatchReply>;
export const FileUnwatchRequest = z.object({ ...Target, watchId: Id }).strict();
export type FileUnwatchRequest = z.infer<typeof FileUnwatchRequest>;
/** stopped: false when the runner did not hold it (already gone). */
export const FileUnwatchReply = z.object({ stopped: z.boolean() }).strict();

/** What happened to a path, as far as the runner could tell once the coalescing window ended (docs/workspace.md, Watching files). */
export const FileChangeKind = z.enum(["create", "modify", "delete"]);
export type FileChangeKind = z.infer<typeof FileChangeKind>;
export const FileChange = z.object({ path: z.string().max(MAX_WORKSPACE_PATH * 2), kind: FileChangeKind }).strict();
export type FileChange = z.infer<typeof FileChange>;
/** Runner → gateway, one message per window (or per MAX_WATCH_BATCH events). */
export const FileWatchBatch = z
  .object({
    watchId: Id,
    changes: z.array(FileChange).max(MAX_WATCH_BATCH),
    /** Events were dropped before this batch (past MAX_WATCH_PENDING, or directories past the runner's bound): re-list to resync. */
    overflow: z.boolean(),
    /** The watch stopped: the watched path or the session went away, or its lease lapsed. Nothing more comes. */
    ended: z.boolean(),
  })
  .strict();
export type FileWatchBatch = z.infer<typeof FileWatchBatch>;

/** The subject a runner publishes one watch's batches on: under its own workspace subjects, so no other runner can publish there. */
export function watchEventsSubject(poolId: string, runnerId: string, watchId: string): string {
  return `paddock.workspace.${poolId}.${runnerId}.watched.${watchId}`;
}
/** Every runner's watch batches (the gateway's subscribe permission). */
export const WATCH_EVENTS_ALL = "paddock.workspace.*.*.watched.>";

export const WorkspaceOps = ["push", "pull", "diff", "read", "list", "write", "delete", "repos", "watch", "unwatch", "tunnel"] as const;
export type WorkspaceOp = (typeof WorkspaceOps)[number];
/** The workspace facts a session's record counts (recordTransfer), each one audit event: archive transfers and file writes. */
export const TransferDirection = z.enum(["push", "pull", "file.write", "file.delete", "exec"]);
export type TransferDirection = z.infer<typeof TransferDirection>;

/** The subject a runner serves one of its session operations on (workspace, exec): `op` is one subject token. */
export function runnerOpSubject(poolId: string, runnerId: string, op: string): string {
  return `paddock.workspace.${poolId}.${runnerId}.${op}`;
}

/** The subject a runner serves one workspace operation on. */
export function workspaceSubject(poolId: string, runnerId: string, op: WorkspaceOp): string {
  return runnerOpSubject(poolId, runnerId, op);
}

/** The object (store `transfers`) a transfer's archive lives in while it moves. */
export function transferObjectName(workspaceId: string, sessionId: string, transferId: string): string {
  return `${workspaceId}/${sessionId}/${transferId}`;
}

/** The context a transfer's archive is sealed for: its store and object name. */
export function transferRef(objectName: string): string {
  return `transfers/${objectName}`;
}

/** The rpcs of one runner: bind them to the runner that holds the session. */
export function workspaceRpcs(poolId: string, runnerId: string) {
  return {
    push: { subject: workspaceSubject(poolId, runnerId, "push"), request: WorkspacePushRequest, result: WorkspacePushReply },
    pull: { subject: workspaceSubject(poolId, runnerId, "pull"), request: WorkspacePullRequest, result: WorkspacePullReply },
    diff: { subject: workspaceSubject(poolId, runnerId, "diff"), request: WorkspaceDiffRequest, result: WorkspaceDiffReply },
    read: { subject: workspaceSubject(poolId, runnerId, "read"), request: FileReadRequest, result: FileReadReply, withBytes: true },
    list: { subject: workspaceSubject(poolId, runnerId, "list"), request: FileListRequest, result: FileListColumns },
    write: { subject: workspaceSubject(poolId, runnerId, "write"), request: FileWriteRequest, result: FileWriteAnswer, withBytes: true },
    delete: { subject: workspaceSubject(poolId, runnerId, "delete"), request: FileDeleteRequest, result: FileDeleteReply },
    repos: { subject: workspaceSubject(poolId, runnerId, "repos"), request: WorkspaceReposRequest, result: WorkspaceReposReply },
    watch: { subject: workspaceSubject(poolId, runnerId, "watch"), request: FileWatchRequest, result: FileWatchReply },
    unwatch: { subject: workspaceSubject(poolId, runnerId, "unwatch"), request: FileUnwatchRequest, result: FileUnwatchReply },
    tunnel: { subject: workspaceSubject(poolId, runnerId, "tunnel"), request: TunnelOpenRequest, result: TunnelOpenReply },
  } satisfies Record<WorkspaceOp, Rpc<z.ZodType, z.ZodType>>;
}
