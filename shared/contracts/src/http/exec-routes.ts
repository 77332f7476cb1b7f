import { z } from "zod";
import { Id } from "../ids.ts";
import { EXEC_OUTPUT_CAP_BYTES, ExecBody, ExecEncoding, ExecFrame, ExecInputReply, ExecList, ExecResult, ExecSignal, ExecSignalReply, ExecStarted, MAX_EXEC_STDIN_BYTES } from "../exec.ts";
import { FILE_CONTENT_TYPE } from "./files.ts";
import { QueryBool, QuerySeq } from "./query.ts";
import { httpRoute, json, jsonBody, NDJSON } from "./route.ts";

/* The exec routes (issue 24 items 1–2): a command in a session's sandbox, and its background processes. */

const SessionParams = z.object({ id: Id }).strict();
const ProcessParams = z.object({ id: Id, processId: Id }).strict();
/** `?since=` a cursor of an earlier read (0: from the start); `?encoding=base64` for raw bytes. */
export const ProcessOutputQuery = z.object({ since: QuerySeq, encoding: ExecEncoding.optional() }).strict();
export const ProcessStdinQuery = z.object({ eof: QueryBool }).strict();
export const ProcessSignalBody = z.object({ signal: ExecSignal }).strict();
/** What a cursor read answers: the frames after `since`, the cursor to pass next, and whether the process has ended (its exit is among the frames). */
export const ProcessOutput = z.object({ frames: z.array(ExecFrame), cursor: z.string(), ended: z.boolean(), encoding: ExecEncoding }).strict();

export const ExecRoutes = {
  exec: httpRoute({
    method: "POST",
    path: "/v1/sessions/:id/exec",
    summary: `Run a command in the running session's sandbox (no PTY): the buffered answer (stdout, stderr each cut at ${EXEC_OUTPUT_CAP_BYTES} bytes), NDJSON frames as output happens (Accept: ${NDJSON}; a client that leaves kills it), or 202 at once with background=true.`,
    params: SessionParams,
    body: jsonBody(ExecBody, { maxBytes: 4 * MAX_EXEC_STDIN_BYTES }),
    responses: [json(ExecResult, [200], "buffered"), { kind: "ndjson", status: [200], schema: ExecFrame, when: `Accept: ${NDJSON}` }, json(ExecStarted, [202], "background=true")],
    errors: ["forbidden", "not_found", "conflict"],
  }),
  listProcesses: httpRoute({
    method: "GET",
    path: "/v1/sessions/:id/processes",
    summary: "The session's exec'd processes (running, and the latest ended), oldest first.",
    params: SessionParams,
    responses: [json(ExecList)],
    errors: ["forbidden", "not_found", "conflict"],
  }),
  readProcessOutput: httpRoute({
    method: "GET",
    path: "/v1/sessions/:id/processes/:processId/output",
    summary: `An exec'd process's output after ?since (a cursor it answered), each chunk once; Accept: ${NDJSON} streams it on until the process exits.`,
    params: ProcessParams,
    query: ProcessOutputQuery,
    responses: [json(ProcessOutput), { kind: "ndjson", status: [200], schema: ExecFrame, when: `Accept: ${NDJSON}` }],
    errors: ["forbidden", "not_found", "conflict"],
  }),
  writeProcessStdin: httpRoute({
    method: "POST",
    path: "/v1/sessions/:id/processes/:processId/stdin",
    summary: `Write the raw body (at most ${MAX_EXEC_STDIN_BYTES} bytes) to a background process's stdin; ?eof=true closes it after.`,
    params: ProcessParams,
    query: ProcessStdinQuery,
    body: { kind: "bytes", contentType: FILE_CONTENT_TYPE },
    responses: [json(ExecInputReply)],
    errors: ["forbidden", "not_found", "conflict", "too_large"],
  }),
  signalProcess: httpRoute({
    method: "POST",
    path: "/v1/sessions/:id/processes/:processId/signal",
    summary: "Send a signal to an exec'd process's whole process group (delivered: false once it ended).",
    params: ProcessParams,
    body: jsonBody(ProcessSignalBody),
    responses: [json(ExecSignalReply)],
    errors: ["forbidden", "not_found", "conflict"],
  }),
};
