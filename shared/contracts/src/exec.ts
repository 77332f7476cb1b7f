import { base64ByteLength, utf8ByteLength } from "./bytes.ts";
import { z } from "zod";
import { Generation, Id } from "./ids.ts";
import type { Rpc } from "./rpc.ts";
import { runnerOpSubject, WorkspacePath } from "./workspace.ts";

/**
 * Exec (issue 24 items 1–2): a command run in a live session's sandbox
 * without a PTY, stdout and stderr apart. The gateway asks the runner that
 * holds the session to start it (request/reply on
 * `paddock.workspace.<pool>.<runner>.exec-<op>`); its output is a log of its
 * own on stream EXEC (`Subjects.exec`), chunks headed with the stream they
 * came from and a last message holding its exit (`ExecExit`). A reader that
 * is attached (the exec route waiting for the end) grants the runner credit
 * as it forwards (`ExecCredit`): the runner stops reading the process's pipes
 * when it is a window ahead, so a slow client slows the command instead of
 * losing its output.
 */

/** The most stdout (and, apart, stderr) bytes a buffered exec answers; past it the rest is read and dropped, and `truncated` says so. */
export const EXEC_OUTPUT_CAP_BYTES = 1024 * 1024;
/** The most stdin bytes the exec body may carry (a background process takes more through its stdin route). */
export const MAX_EXEC_STDIN_BYTES = 1024 * 1024;
/** The most stdin bytes one bus message carries (base64 in JSON, under NATS's 1 MB payload): more goes in several. */
export const EXEC_STDIN_PIECE_BYTES = 256 * 1024;
/** Output (stdout and stderr together) a start's answer carries inline at most: base64 of it fits any NATS payload limit. */
export const EXEC_INLINE_MAX_BYTES = 256 * 1024;
/** The longest a runner holds a start's answer for its command to end (inlineWaitMs). */
export const EXEC_INLINE_MAX_WAIT_MS = 5_000;
/** A command's time when the body names none, and the longest it may name. */
export const DEFAULT_EXEC_TIMEOUT_MS = 60_000;
export const MAX_EXEC_TIMEOUT_MS = 24 * 60 * 60_000;
/** How many exec'd processes a session holds at once (running or ended, not yet reaped by the runner). */
export const MAX_SESSION_EXECS = 256;
const MAX_EXEC_ENV = 128;

const noNul = (s: string) => !s.includes("\0");

/** A variable the caller may set; PADDOCK_ variables are the runner's own. */
const ExecEnvName = z
  .string()
  .regex(/^[A-Za-z_][A-Za-z0-9_]{0,127}$/, "variable names are [A-Za-z_][A-Za-z0-9_]*")
  .refine((n) => !n.startsWith("PADDOCK_"), "PADDOCK_ variables are set by the runner");
export const ExecEnv = z
  .record(ExecEnvName, z.string().max(32 * 1024).refine(noNul, "must not contain NUL"))
  .refine((env) => Object.keys(env).length <= MAX_EXEC_ENV, `at most ${MAX_EXEC_ENV} variables`);

export const ExecCommand = z
  .array(z.string().max(4096).refine(noNul, "must not contain NUL"))
  .min(1)
  .max(256)
  .refine((cmd) => cmd[0] !== "", "the command must not be empty");

/** How stdin is given and stdout/stderr are answered: UTF-8 text (invalid sequences replaced), or base64 of the raw bytes. */
export const ExecEncoding = z.enum(["utf8", "base64"]);
export type ExecEncoding = z.infer<typeof ExecEncoding>;

/** The body of POST /v1/sessions/:id/exec. */
export const ExecBody = z
  .object({
    cmd: ExecCommand,
    /** The working directory, relative to the workspace (the workspace itself when absent). */
    cwd: WorkspacePath.optional(),
    /** Set over the session's own environment (the one its apps get). */
    env: ExecEnv.optional(),
    /** Written to the command's stdin, which is then closed (in `encoding`); without it stdin is empty, or open for a background process. */
    stdin: z.string().max(2 * MAX_EXEC_STDIN_BYTES).optional(),
    encoding: ExecEncoding.optional(),
    timeoutMs: z.number().int().min(1).max(MAX_EXEC_TIMEOUT_MS).optional(),
    /** Answer 202 as soon as it started; read its output, write its stdin and signal it through /processes. No timeout unless given. */
    background: z.boolean().optional(),
  })
  .strict()
  .superRefine((body, ctx) => {
    if (body.stdin === undefined) return;
    const bytes = body.encoding === "base64" ? base64ByteLength(body.stdin) : utf8ByteLength(body.stdin);
    if (bytes > MAX_EXEC_STDIN_BYTES) ctx.addIssue({ code: "custom", path: ["stdin"], message: `at most ${MAX_EXEC_STDIN_BYTES} bytes` });
    if (body.encoding === "base64" && !/^[A-Za-z0-9+/]*={0,2}$/.test(body.stdin)) ctx.addIssue({ code: "custom", path: ["stdin"], message: "must be base64" });
  });
export type ExecBody = z.infer<typeof ExecBody>;

/** How a command ended. exitCode null: killed by `signal`. timedOut: the runner killed its whole process group at its timeout. */
export const ExecExit = z
  .object({
    exitCode: z.number().int().nullable(),
    signal: z.string().max(32).nullable(),
    durationMs: z.number().int().nonnegative(),
    timedOut: z.boolean(),
  })
  .strict();
export type ExecExit = z.infer<typeof ExecExit>;

/** The buffered answer of POST /v1/sessions/:id/exec. */
export const ExecResult = ExecExit.extend({
  id: Id,
  stdout: z.string(),
  stderr: z.string(),
  /** True when stdout or stderr went past EXEC_OUTPUT_CAP_BYTES and only its first bytes are here. */
  truncated: z.boolean(),
  encoding: ExecEncoding,
}).strict();
export type ExecResult = z.infer<typeof ExecResult>;

/** One line of the streamed answer (Accept: application/x-ndjson), and of a background process's output. */
export const ExecFrame = z.union([
  z.object({ stdout: z.string() }).strict(),
  z.object({ stderr: z.string() }).strict(),
  z.object({ exit: ExecExit }).strict(),
  /** The stream ends without an exit (the runner lost the session): code as in the error body. */
  z.object({ error: z.object({ code: z.string(), message: z.string() }).strict() }).strict(),
]);
export type ExecFrame = z.infer<typeof ExecFrame>;

/** 202 answer of a background exec. */
export const ExecStarted = z.object({ id: Id }).strict();

/** The signals a caller may send an exec'd process (its whole process group). */
export const ExecSignal = z.enum(["SIGINT", "SIGTERM", "SIGKILL", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGSTOP", "SIGCONT"]);
export type ExecSignal = z.infer<typeof ExecSignal>;

export const ExecProcessInfo = z
  .object({
    id: Id,
    cmd: z.array(z.string()),
    startedAt: z.number().int(),
    background: z.boolean(),
    /** Absent while it runs. */
    exit: ExecExit.optional(),
  })
  .strict();
export type ExecProcessInfo = z.infer<typeof ExecProcessInfo>;

/* ---- bus: gateway ↔ the runner holding the session ---- */

const Target = { sessionId: Id, workspaceId: Id, placementGeneration: Generation.min(1) };

export const ExecStartRequest = z
  .object({
    ...Target,
    execId: Id,
    cmd: ExecCommand,
    cwd: WorkspacePath,
    env: ExecEnv,
    /** Raw stdin bytes, base64 (one piece; more follows as ExecInputRequests); written then stdin is closed unless keepStdinOpen. */
    stdin: z.string().max(2 * EXEC_STDIN_PIECE_BYTES),
    keepStdinOpen: z.boolean(),
    /** Absent: no timeout (a background process). */
    timeoutMs: z.number().int().min(1).max(MAX_EXEC_TIMEOUT_MS).optional(),
    /** A reader grants credit (ExecCredit) and the output waits for it; a background process's output goes to its log at the log's pace. */
    attached: z.boolean(),
    /**
     * A buffered caller's shortcut: the runner holds its answer until the
     * command ends, for up to waitMs, and answers its whole output with it
     * (`done`) when that came to at most EXEC_INLINE_MAX_BYTES. Otherwise
     * (longer, or more output) it answers without, and the caller reads the
     * log as any reader does. The log is written either way.
     */
    inlineWaitMs: z.number().int().min(1).max(EXEC_INLINE_MAX_WAIT_MS).optional(),
  })
  .strict();
export type ExecStartRequest = z.infer<typeof ExecStartRequest>;
/** A command that ended within a start's inlineWaitMs: its exit and all of its output, base64. */
export const ExecDone = z.object({ exit: ExecExit, stdout: z.base64().max(Math.ceil(EXEC_INLINE_MAX_BYTES / 3) * 4), stderr: z.base64().max(Math.ceil(EXEC_INLINE_MAX_BYTES / 3) * 4) }).strict();
export type ExecDone = z.infer<typeof ExecDone>;
export const ExecStartReply = z.object({ execId: Id, startedAt: z.number().int(), done: ExecDone.optional() }).strict();

export const ExecSignalRequest = z.object({ ...Target, execId: Id, signal: ExecSignal }).strict();
export type ExecSignalRequest = z.infer<typeof ExecSignalRequest>;
/** delivered: false when the process had already ended. */
export const ExecSignalReply = z.object({ delivered: z.boolean() }).strict();

export const ExecInputRequest = z.object({ ...Target, execId: Id, data: z.string().max(2 * EXEC_STDIN_PIECE_BYTES), eof: z.boolean() }).strict();
export type ExecInputRequest = z.infer<typeof ExecInputRequest>;
export const ExecInputReply = z.object({ written: z.number().int().nonnegative() }).strict();

export const ExecListRequest = z.object(Target).strict();
export const ExecList = z.object({ processes: z.array(ExecProcessInfo).max(MAX_SESSION_EXECS) }).strict();
export type ExecList = z.infer<typeof ExecList>;

/**
 * Reader → runner (core NATS, `execCreditSubject`): the reader has taken
 * `bytes` of the exec's output in all. Sent as it forwards, and again every
 * EXEC_CREDIT_HEARTBEAT_MS while attached: a lost credit is made good by the
 * next, and an attached exec that hears nothing for EXEC_READER_TIMEOUT_MS
 * has lost its reader (the client went, or its gateway died) and is killed
 * (checked per period: a silence of one whole period, at most two, counts).
 */
export const ExecCredit = z.object({ sessionId: Id, execId: Id, bytes: z.number().int().nonnegative() }).strict();
export type ExecCredit = z.infer<typeof ExecCredit>;
/** The runner's answer to a credit sent as a request (the heartbeat): whether it still holds the process. */
export const ExecCreditReply = z.object({ known: z.boolean() }).strict();
export type ExecCreditReply = z.infer<typeof ExecCreditReply>;
export const EXEC_CREDIT_HEARTBEAT_MS = 2_000;
export const EXEC_READER_TIMEOUT_MS = 15_000;
/** How far the output may run ahead of an attached reader's credit. */
export const EXEC_CREDIT_WINDOW_BYTES = 8 * 1024 * 1024;
/**
 * One EXEC chunk's most bytes, as a TERM chunk's (decisions 0065, 0070): one
 * publish in flight per process, so the chunk is what a round trip to
 * nats-server carries. The runner writes chunks of at most this; a reader
 * pulls in bytes by it; the EXEC stream keeps 4,096 chunks per process.
 */
export const EXEC_CHUNK_MAX_BYTES = 256 * 1024;

export const ExecOps = ["exec-start", "exec-signal", "exec-input", "exec-list"] as const;
export type ExecOp = (typeof ExecOps)[number];

export function execCreditSubject(poolId: string, runnerId: string): string {
  return runnerOpSubject(poolId, runnerId, "exec-credit");
}

/** The exec rpcs of one runner: bind them to the runner that holds the session. */
export function execRpcs(poolId: string, runnerId: string) {
  return {
    start: { subject: runnerOpSubject(poolId, runnerId, "exec-start"), request: ExecStartRequest, result: ExecStartReply },
    signal: { subject: runnerOpSubject(poolId, runnerId, "exec-signal"), request: ExecSignalRequest, result: ExecSignalReply },
    input: { subject: runnerOpSubject(poolId, runnerId, "exec-input"), request: ExecInputRequest, result: ExecInputReply },
    list: { subject: runnerOpSubject(poolId, runnerId, "exec-list"), request: ExecListRequest, result: ExecList },
  } satisfies Record<string, Rpc<z.ZodType, z.ZodType>>;
}
