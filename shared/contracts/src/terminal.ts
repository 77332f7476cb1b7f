import { z } from "zod";
import { Generation, Id } from "./ids.ts";
import { SessionStateSchema } from "./session.ts";

export const AttachMode = z.enum(["viewer", "controller"]);
export type AttachMode = z.infer<typeof AttachMode>;

/** Query of GET /v1/sessions/:id/terminal. `since`: all | screen | a cursor. */
export const AttachQuery = z
  .object({
    app: Id.optional(),
    mode: AttachMode.default("viewer"),
    since: z.union([z.literal("all"), z.literal("screen"), z.string().regex(/^\d{1,15}$/)]).default("screen"),
    /** A single-use attach ticket (POST /v1/sessions/:id/attach-ticket) instead of the Authorization header. */
    ticket: z.string().min(1).max(256).optional(),
  })
  .strict();
export type AttachQuery = z.infer<typeof AttachQuery>;

/** Close code for a controller superseded by a newer one. */
export const CLOSE_SUPERSEDED = 4001;
/** Close code for a client whose send buffer overflowed; it may resume from its cursor. */
export const CLOSE_SLOW_CLIENT = 4008;
/** Close code when the token the socket was opened with is revoked or expires. */
export const CLOSE_REVOKED = 4003;
/** Close code when the session is gone or the app ended and the log is complete. */
export const CLOSE_ENDED = 4000;

/** Server → client text frames. */
export const ServerFrame = z.discriminatedUnion("type", [
  z
    .object({
      type: z.literal("hello"),
      sessionId: Id,
      app: Id,
      mode: AttachMode,
      controllerGeneration: Generation,
      /** The cursor of the last chunk the log held at attach time (0: empty). */
      cursor: z.number().int().nonnegative(),
    })
    .strict(),
  z.object({ type: z.literal("truncated"), from: z.number().int().nonnegative() }).strict(),
  z.object({ type: z.literal("superseded"), controllerGeneration: Generation }).strict(),
  z.object({ type: z.literal("status"), state: SessionStateSchema }).strict(),
  z.object({ type: z.literal("exit"), app: Id, code: z.number().int().nullable() }).strict(),
  z.object({ type: z.literal("error"), code: z.string(), message: z.string().optional() }).strict(),
]);
export type ServerFrame = z.infer<typeof ServerFrame>;

/** Client → server text frames (binary frames are stdin bytes). */
export const ClientFrame = z.discriminatedUnion("type", [
  z
    .object({
      type: z.literal("resize"),
      cols: z.number().int().min(1).max(1000),
      rows: z.number().int().min(1).max(1000),
    })
    .strict(),
]);
export type ClientFrame = z.infer<typeof ClientFrame>;

/** The `Paddock-Input-Kind` header of a message on an input subject. */
export const InputKind = {
  /** Stdin bytes for the app's process. */
  data: "data",
  /** A `ResizeInput` JSON body. */
  resize: "resize",
  /** Empty: a new controller took over at the generation in `Paddock-Controller-Generation`. */
  claim: "claim",
  /**
   * Empty, sent as a request: the sender's input window is spent. Answered
   * (`InputCredit`) once everything sent before it on the subject is queued and
   * the app's input queue is back under its low-water mark, or `ready: false`
   * after `INPUT_CREDIT_HOLD_MS` (ask again).
   */
  credit: "credit",
} as const;
export type InputKind = (typeof InputKind)[keyof typeof InputKind];

/** Resize carried on the input subject (Paddock-Input-Kind: resize). */
export const ResizeInput = z
  .object({ cols: z.number().int().min(1).max(1000), rows: z.number().int().min(1).max(1000) })
  .strict();

export type TerminalSize = z.infer<typeof ResizeInput>;

/**
 * The size every app's terminal starts at: its PTY is spawned at it, and the
 * screen of a placement's TERM log starts at it until a resize marker
 * (`Paddock-Terminal-Size`) says otherwise.
 */
export const INITIAL_TERMINAL_SIZE: Readonly<TerminalSize> = { cols: 80, rows: 24 };

/** The value of a `Paddock-Terminal-Size` header. */
export function formatTerminalSize(size: TerminalSize): string {
  return `${String(size.cols)}x${String(size.rows)}`;
}

/** A `Paddock-Terminal-Size` header value; undefined when malformed or out of ResizeInput's bounds. */
export function parseTerminalSize(raw: string | undefined): TerminalSize | undefined {
  const m = /^(\d{1,4})x(\d{1,4})$/.exec(raw ?? "");
  if (!m) return undefined;
  const parsed = ResizeInput.safeParse({ cols: Number(m[1]), rows: Number(m[2]) });
  return parsed.success ? parsed.data : undefined;
}

/** The answer to a `credit` input message. */
export const InputCredit = z.object({ ready: z.boolean() }).strict();
export type InputCredit = z.infer<typeof InputCredit>;

/**
 * Input flow control (gateway → runner): a sender may have this many bytes, or
 * this many messages, on an input subject before it asks for credit and waits.
 */
export const INPUT_WINDOW_BYTES = 64 * 1024;
export const INPUT_WINDOW_MESSAGES = 512;
/** Credit is granted while the app's input queue holds at most this much. */
export const INPUT_LOW_WATER_BYTES = 64 * 1024;
/** A runner answers a credit request within this long (under the 1 min response permission of its principal). */
export const INPUT_CREDIT_HOLD_MS = 10_000;

/** Binary output frame: 8-byte big-endian cursor followed by raw bytes. */
export function encodeOutputFrame(cursor: number, bytes: Uint8Array): Uint8Array {
  const frame = new Uint8Array(8 + bytes.byteLength);
  new DataView(frame.buffer).setBigUint64(0, BigInt(cursor));
  frame.set(bytes, 8);
  return frame;
}

export function decodeOutputFrame(frame: Uint8Array): { cursor: number; bytes: Uint8Array } {
  if (frame.byteLength < 8) throw new Error("output frame shorter than its 8-byte cursor");
  const view = new DataView(frame.buffer, frame.byteOffset, frame.byteLength);
  return { cursor: Number(view.getBigUint64(0)), bytes: frame.subarray(8) };
}

/** Body of a presence heartbeat on `paddock.presence.<session>`. */
export const Presence = z
  .object({
    sessionId: Id,
    workspaceId: Id,
    /** Clients attached through the sending gateway (0: the last one left). */
    clients: z.number().int().nonnegative(),
  })
  .strict();
export type Presence = z.infer<typeof Presence>;

/** Sessions one activity report names at most (a runner with more active sessions sends several). */
export const MAX_ACTIVITY_SESSIONS = 1_000;

/**
 * A runner's coarse activity report on `paddock.activity.<pool>.<runner>`:
 * the sessions whose apps wrote terminal output since its previous report
 * (at most one report per interval, never per byte). Schedulers count it as
 * real activity for the idle policy only for sessions the record places on
 * that runner.
 */
export const RunnerActivity = z
  .object({
    poolId: Id,
    runnerId: Id,
    sessions: z.array(Id).min(1).max(MAX_ACTIVITY_SESSIONS),
  })
  .strict();
export type RunnerActivity = z.infer<typeof RunnerActivity>;

/** A screen checkpoint's serialized screen is at most this long (UTF-8 bytes); SCREENS refuses larger messages. */
export const MAX_SCREEN_CHECKPOINT_BYTES = 512 * 1024;

/**
 * The largest TERM chunk a runner writes: output that keeps arriving fills
 * chunks up to this (decision 0065), and the scheduler's per-app retention,
 * a count of chunks, is derived from it.
 */
export const TERM_CHUNK_MAX_BYTES = 256 * 1024;

/**
 * Body of a screen checkpoint on `paddock.screen.<pool>.<runner>.<session>.<app>`
 * (header `Paddock-Placement-Generation`): the screen a terminal emulator
 * shows after every chunk its runner committed to the app's log in that
 * placement generation, up to and including TERM sequence `cursor`.
 */
export const ScreenCheckpoint = z
  .object({
    cursor: z.number().int().positive(),
    cols: z.number().int().min(1).max(1000),
    rows: z.number().int().min(1).max(1000),
    /** What `since=screen` sends: replayed into a terminal of cols × rows it repaints the screen. */
    screen: z.string().max(MAX_SCREEN_CHECKPOINT_BYTES),
  })
  .strict();
export type ScreenCheckpoint = z.infer<typeof ScreenCheckpoint>;
