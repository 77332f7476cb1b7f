import { z } from "zod";
import { WorkspacePath } from "../workspace.ts";
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

