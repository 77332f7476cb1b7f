import { z } from "zod";
import { FileChangeKind, WorkspacePath } from "../workspace.ts";
import { QueryBool, QueryDepth } from "./query.ts";

/* The query strings of the files routes (GET|PUT|DELETE /v1/sessions/:id/files, GET …/files/list). */

/** A path naming something in the workspace, not the workspace itself. */
const FilePath = WorkspacePath.refine((p) => p.split("/").some((s) => s !== "" && s !== "."), "must name a file in the workspace");
/** `?path=` of a file: required. */
export const FileQuery = z.object({ path: FilePath }).strict();
/** `?path=&mode=` of a write: mode in octal (`644`, `0755`), 644 when absent. */
export const FileWriteQuery = z
  .object({
    path: FilePath,
    mode: z
      .string()
      .regex(/^0?[0-7]{3}$/, "must be octal permission bits, e.g. 644")
      .transform((m) => parseInt(m, 8))
      .default(0o644),
  })
  .strict();
/** `?path=&recursive=` of a delete: a directory needs recursive=true unless it is empty. */
export const FileDeleteQuery = z.object({ path: FilePath, recursive: QueryBool }).strict();
/** `?path=&depth=` of a listing: the workspace itself when path is absent. */
export const FileListQuery = z.object({ path: WorkspacePath.optional(), depth: QueryDepth }).strict();
/** Content type of a file's raw bytes. */
export const FILE_CONTENT_TYPE = "application/octet-stream";


/** `?path=` of a watch: the workspace itself when absent; a directory is watched with everything under it, a file alone. */
export const FileWatchQuery = z
  .object({
    path: WorkspacePath.optional(),
    /** An attach ticket (POST …/attach-ticket, either mode) instead of the Authorization header, for browsers. */
    ticket: z.string().min(1).max(256).optional(),
  })
  .strict();
export type FileWatchQuery = z.infer<typeof FileWatchQuery>;

/**
 * A frame of GET /v1/sessions/:id/files/watch (server → client; the client
 * sends nothing, and a data frame from it closes the socket with 1003).
 * `change`: path relative to the workspace. `overflow`: changes were dropped
 * (too many at once, or the client read too slowly); list the path again to
 * resync. Close codes: 4000 the watch ended (the watched path or the session
 * went away), 4003 the token was revoked or expired, 1011 the runner no
 * longer holds the watch, 1001 the gateway stops.
 */
export const FileWatchFrame = z.discriminatedUnion("type", [
  z.object({ type: z.literal("change"), path: z.string(), kind: FileChangeKind }).strict(),
  z.object({ type: z.literal("overflow") }).strict(),
]);
export type FileWatchFrame = z.infer<typeof FileWatchFrame>;
