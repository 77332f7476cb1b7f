/**
 * The frames the runner and a session's paddock-init (native/paddock-init.c)
 * exchange over the init's stdin and stdout: type (1 byte), id (u32 LE),
 * payload length (u32 LE), payload. This file is the TypeScript end of that
 * contract; the C file's header comment is the other, and the tests in
 * exec-holder.test.ts run the two against each other.
 */

export const HEADER_BYTES = 9;
/** The largest payload either end sends (the init dies on a larger one; the runner kills an init that sends one). */
export const MAX_FRAME_BYTES = 4 * 1024 * 1024;

/** What the runner sends. */
export const ToInit = { start: "S", stdin: "I", signal: "K", pause: "Z", tunnel: "T" } as const;
/** What the init sends. */
export const FromInit = { started: "P", stdout: "O", stderr: "E", written: "W", stdinClosed: "C", drained: "D", exit: "X" } as const;
export type FromInit = (typeof FromInit)[keyof typeof FromInit];

export interface InitFrame {
  type: string;
  id: number;
  payload: Buffer;
}

export function encodeFrame(type: (typeof ToInit)[keyof typeof ToInit], id: number, payload: Uint8Array = new Uint8Array(0)): Buffer {
  const frame = Buffer.allocUnsafe(HEADER_BYTES + payload.byteLength);
  frame.write(type, 0, "latin1");
  frame.writeUInt32LE(id, 1);
  frame.writeUInt32LE(payload.byteLength, 5);
  frame.set(payload, HEADER_BYTES);
  return frame;
}

/** A start: argv, the complete environment, and the absolute cwd as the sandbox sees it (none may hold NUL). */
export function startPayload(argv: readonly string[], env: Readonly<Record<string, string>>, cwd: string): Buffer {
  const vars = Object.entries(env).map(([name, value]) => `${name}=${value}`);
  const strings = [...argv, ...vars, cwd];
  if (strings.some((s) => s.includes("\0"))) throw new Error("a start's strings may not hold NUL");
  const head = Buffer.allocUnsafe(8);
  head.writeUInt32LE(argv.length, 0);
  head.writeUInt32LE(vars.length, 4);
  return Buffer.concat([head, Buffer.from(strings.map((s) => `${s}\0`).join(""))]);
}

export function u32Payload(value: number): Buffer {
  const b = Buffer.allocUnsafe(4);
  b.writeUInt32LE(value, 0);
  return b;
}

export class InitProtocolError extends Error {
  readonly code = "init_protocol";
  constructor(message: string) {
    super(message);
    this.name = "InitProtocolError";
  }
}

const KNOWN = new Set<string>(Object.values(FromInit));
const FIXED_LENGTH: Partial<Record<string, number>> = { P: 4, W: 4, X: 4, C: 0, D: 0 };

/**
 * Reads the init's frames off its stdout as they arrive. The init runs as
 * the session's user: what it says is checked (known types, bounded and
 * exact lengths) and anything else is an InitProtocolError (the holder then
 * kills it); it is never trusted beyond its own session's commands.
 */
export class FrameReader {
  private pending: Buffer[] = [];
  private pendingBytes = 0;

  push(chunk: Buffer): InitFrame[] {
    this.pending.push(chunk);
    this.pendingBytes += chunk.byteLength;
    const frames: InitFrame[] = [];
    while (this.pendingBytes >= HEADER_BYTES) {
      const head = this.peek(HEADER_BYTES);
      const type = String.fromCharCode(head[0] ?? 0);
      const length = head.readUInt32LE(5);
      if (!KNOWN.has(type)) throw new InitProtocolError(`unknown frame type ${head[0] ?? 0}`);
      if (length > MAX_FRAME_BYTES) throw new InitProtocolError(`frame of ${length} bytes`);
      const fixed = FIXED_LENGTH[type];
      if (fixed !== undefined && length !== fixed) throw new InitProtocolError(`frame ${type} of ${length} bytes`);
      if (this.pendingBytes < HEADER_BYTES + length) break;
      const whole = this.take(HEADER_BYTES + length);
      frames.push({ type, id: whole.readUInt32LE(1), payload: whole.subarray(HEADER_BYTES) });
    }
    return frames;
  }

  private peek(n: number): Buffer {
    const first = this.pending[0];
    if (first && first.byteLength >= n) return first;
    const joined = Buffer.concat(this.pending);
    this.pending = [joined];
    return joined;
  }

  private take(n: number): Buffer {
    const joined = this.peek(n);
    const whole = joined.subarray(0, n);
    const rest = joined.subarray(n);
    this.pending = rest.byteLength > 0 ? [rest] : [];
    this.pendingBytes -= n;
    return whole;
  }
}

/** A wait status (as waitpid gives it) as an exit code or a signal number. */
export function decodeWaitStatus(status: number): { exitCode: number | null; signal: number | null } {
  const sig = status & 0x7f;
  if (sig === 0) return { exitCode: (status >> 8) & 0xff, signal: null };
  return { exitCode: null, signal: sig };
}
