import { PassThrough, Writable } from "node:stream";
import { expect } from "vitest";
import { main } from "../main.ts";
import type { CliEnv } from "../io.ts";

/** A stdout/stderr stand-in that keeps what was written and wakes waiters. */
export class Sink extends Writable {
  private chunks: Buffer[] = [];
  private waiters: Array<() => void> = [];

  override _write(chunk: Buffer, _enc: BufferEncoding, cb: () => void): void {
    this.chunks.push(chunk);
    for (const w of this.waiters.splice(0)) w();
    cb();
  }

  text(): string {
    return Buffer.concat(this.chunks).toString("utf8");
  }

  /** What was written, byte for byte. */
  bytes(): Buffer {
    return Buffer.concat(this.chunks);
  }

  /** Resolves once the written text contains needle. */
  async waitFor(needle: string): Promise<void> {
    while (!this.text().includes(needle)) await new Promise<void>((r) => this.waiters.push(r));
  }
}

/** A PassThrough stdin that says it is a terminal, recording raw-mode switches. */
export class FakeTtyStdin extends PassThrough {
  readonly isTTY = true;
  readonly rawModes: boolean[] = [];
  setRawMode(raw: boolean): this {
    this.rawModes.push(raw);
    return this;
  }
}

export interface StartOptions {
  /** Make stdin and stdout look like a terminal of this size. */
  readonly tty?: { cols: number; rows: number };
}

export interface CliRun {
  readonly stdout: Sink;
  readonly stderr: Sink;
  /** Write here to feed the CLI's stdin (not a TTY). */
  readonly stdin: PassThrough | FakeTtyStdin;
  readonly code: Promise<number>;
}

/** Runs the CLI in-process with its own stdio. */
export function startCli(argv: readonly string[], env: CliEnv = {}, opts: StartOptions = {}): CliRun {
  const stdout = Object.assign(new Sink(), opts.tty ? { isTTY: true, columns: opts.tty.cols, rows: opts.tty.rows } : {});
  const stderr = new Sink();
  const stdin = opts.tty ? new FakeTtyStdin() : new PassThrough();
  const code = main(argv, { stdin, stdout, stderr, env });
  return { stdout, stderr, stdin, code };
}

/** Runs the CLI to its end; with stdin, that is its whole stdin (then closed). */
export async function runCli(argv: readonly string[], env: CliEnv = {}, stdin?: string | Buffer): Promise<{ code: number; stdout: string; stderr: string }> {
  const run = startCli(argv, env);
  if (stdin !== undefined) run.stdin.end(stdin);
  const code = await run.code;
  return { code, stdout: run.stdout.text(), stderr: run.stderr.text() };
}

/** A bad invocation: exit 2, the reason on stderr, nothing on stdout (no server is asked). */
export async function expectUsageError(argv: readonly string[], reason: RegExp, env: CliEnv): Promise<void> {
  const r = await runCli(argv, env);
  expect(r.code).toBe(2);
  expect(r.stderr).toMatch(reason);
  expect(r.stdout).toBe("");
}
