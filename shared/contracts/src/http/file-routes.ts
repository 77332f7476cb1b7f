import { z } from "zod";
import { Id } from "../ids.ts";
import { FileDeleteReply, FileList, FileWriteReply, MAX_LIST_DEPTH } from "../workspace.ts";
import { FILE_CONTENT_TYPE, FileDeleteQuery, FileListQuery, FileQuery, FileWatchFrame, FileWatchQuery, FileWriteQuery } from "./files.ts";
import { httpRoute, json } from "./route.ts";

/* The files routes (issue 24 item 3): one path of a live session's workspace at a time, and a watch of its changes. */

const SessionParams = z.object({ id: Id }).strict();

export const FileRoutes = {
  readFile: httpRoute({
    method: "GET",
    path: "/v1/sessions/:id/files",
    summary: "One file of the live session's workspace, raw bytes (404 missing, 400 a directory or a path through a symlink); a `Range: bytes=` header answers 206 with that part (416 past the end).",
    params: SessionParams,
    query: FileQuery,
    responses: [{ kind: "bytes", status: [200, 206], contentType: FILE_CONTENT_TYPE }],
    errors: ["forbidden", "not_found", "conflict"],
  }),
  writeFile: httpRoute({
    method: "PUT",
    path: "/v1/sessions/:id/files",
    summary: "Write one file of the live session's workspace from the raw body (parents made; ?mode= octal, 644 by default); replaces a file or link at the path.",
    params: SessionParams,
    query: FileWriteQuery,
    body: { kind: "bytes", contentType: FILE_CONTENT_TYPE },
    responses: [json(FileWriteReply)],
    errors: ["forbidden", "not_found", "conflict", "too_large"],
  }),
  deleteFile: httpRoute({
    method: "DELETE",
    path: "/v1/sessions/:id/files",
    summary: "Remove a file, link or empty directory of the live session's workspace (?recursive=true: a directory and everything in it).",
    params: SessionParams,
    query: FileDeleteQuery,
    responses: [json(FileDeleteReply)],
    errors: ["forbidden", "not_found", "conflict"],
  }),
  listFiles: httpRoute({
    method: "GET",
    path: "/v1/sessions/:id/files/list",
    summary: `A directory of the live session's workspace (?path, default the workspace), ?depth levels deep (1 to ${MAX_LIST_DEPTH}); paths relative to the workspace.`,
    params: SessionParams,
    query: FileListQuery,
    responses: [json(FileList)],
    errors: ["forbidden", "not_found", "conflict"],
  }),
  watchFiles: httpRoute({
    method: "GET",
    path: "/v1/sessions/:id/files/watch",
    summary: "A WebSocket of change frames for ?path (default the workspace; a directory with everything under it, or one file) of the live session's workspace; `overflow` when events were dropped.",
    params: SessionParams,
    query: FileWatchQuery,
    responses: [{ kind: "websocket", status: [101], schema: FileWatchFrame }],
    errors: ["forbidden", "not_found", "conflict"],
  }),
};
