import type { Readable, Writable } from "node:stream";

/** The process environment as the CLI sees it; read only by loadCliConfig. */
export type CliEnv = Readonly<Record<string, string | undefined>>;

/** What a terminal stdin offers beyond a plain stream. */
export type CliStdin = Readable & { isTTY?: boolean; setRawMode?: (raw: boolean) => unknown };
/** What a terminal stdout offers beyond a plain stream. */
export type CliStdout = Writable & { isTTY?: boolean; columns?: number; rows?: number };

/**
 * Everything main() touches of the outside world, so tests can run the CLI
 * in-process. The exit code is main()'s return value.
 */
export interface CliIo {
  stdin: CliStdin;
  stdout: CliStdout;
  stderr: Writable & { isTTY?: boolean; columns?: number };
  env: CliEnv;
  /** Where SIGWINCH (a resize) and SIGINT (Ctrl-C, which `exec` handles itself) are observed; absent in tests. */
  signals?: { on(signal: "SIGWINCH" | "SIGINT", fn: () => void): unknown; off(signal: "SIGWINCH" | "SIGINT", fn: () => void): unknown };
}

export const ExitCode = { ok: 0, failure: 1, usage: 2 } as const;

/** Bad invocation: printed as-is, exit code 2. */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "UsageError";
  }
}

/** An error answer of the public API (or an unreachable one): printed as `error: code: message`, exit code 1. */
export class ApiError extends Error {
  constructor(
    readonly code: string,
    message: string,
    readonly status?: number,
  ) {
    super(message);
    this.name = "ApiError";
  }

  get retryable(): boolean {
    return this.code === "unavailable";
  }
}

/** Writes and resolves once the chunk is handed to the stream. */
export function write(stream: Writable, data: string | Uint8Array): Promise<void> {
  return new Promise((resolve, reject) => {
    stream.write(data, (err) => (err ? reject(err) : resolve()));
  });
}
