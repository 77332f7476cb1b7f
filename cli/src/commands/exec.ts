import { constants as osConstants } from "node:os";
import { DEFAULT_EXEC_TIMEOUT_MS, ExecBody, ExecFrame, ExecStarted, HttpApi, MAX_EXEC_STDIN_BYTES, MAX_EXEC_TIMEOUT_MS, NDJSON, type ExecExit } from "@paddock/contracts";
import { apiOf, notice, parseCommand, type Command, type Ctx } from "../command.ts";
import { ndjsonOf, type ApiClient } from "../http.ts";
import { ApiError, UsageError, write } from "../io.ts";

/** As timeout(1): the command ran out of time. */
export const EXEC_TIMEOUT_EXIT = 124;
/** As `docker run` and timeout(1): exec itself failed (the gateway refused, the stream broke), so a script can tell it from the command's own codes. */
export const EXEC_FAILURE_EXIT = 125;
/** As a shell after Ctrl-C: 128 + SIGINT. */
const INTERRUPTED_EXIT = 128 + osConstants.signals.SIGINT;

/** The exit code a shell would give: the command's own, 128+n when signal n killed it, 124 at its timeout. */
export function exitCodeOf(exit: ExecExit): number {
  if (exit.timedOut) return EXEC_TIMEOUT_EXIT;
  if (exit.exitCode !== null) return exit.exitCode;
  const n = exit.signal === null ? undefined : (osConstants.signals as Record<string, number | undefined>)[exit.signal];
  return n === undefined ? EXEC_FAILURE_EXIT : 128 + n;
}

/** Where a body field's problem came from on the command line. */
const FLAG_OF: Record<string, string> = { cmd: "the command", cwd: "--cwd", env: "--env", timeoutMs: "--timeout-ms" };

/** The flags and command as the exec body, checked by the contract's own schema (so the CLI refuses exactly what the gateway would). */
function bodyOf(flags: { cwd?: string | undefined; env?: string[] | undefined; "timeout-ms"?: number | undefined }, cmd: string[]): ExecBody {
  const env: Record<string, string> = {};
  for (const pair of flags.env ?? []) {
    const eq = pair.indexOf("=");
    if (eq <= 0) throw new UsageError(`paddock exec: --env takes NAME=VALUE, got ${JSON.stringify(pair)}`);
    env[pair.slice(0, eq)] = pair.slice(eq + 1);
  }
  const body = {
    cmd,
    encoding: "base64" as const,
    ...(flags.cwd !== undefined ? { cwd: flags.cwd } : {}),
    ...(flags.env?.length ? { env } : {}),
    ...(flags["timeout-ms"] !== undefined ? { timeoutMs: flags["timeout-ms"] } : {}),
  };
  const parsed = ExecBody.safeParse(body);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const field = String(issue?.path[0] ?? "");
    // A bad variable name is an issue about a record's key: its own reason is nested in it.
    const nested = issue && "issues" in issue && Array.isArray(issue.issues) ? (issue.issues[0] as { message?: string } | undefined)?.message : undefined;
    // Which variable it was: the first that the schema refuses on its own.
    const key = field === "env" ? Object.entries(env).find(([k, v]) => !ExecBody.safeParse({ cmd: ["true"], env: { [k]: v } }).success)?.[0] : undefined;
    throw new UsageError(`paddock exec: ${FLAG_OF[field] ?? field}${key ? ` (${key})` : ""}: ${nested ?? issue?.message ?? "invalid"}`);
  }
  return parsed.data;
}

/** stdin read up to the body's limit: all of it, or (more set) the first bytes and the iterator to read the rest from. */
interface StdinHead {
  bytes: Buffer;
  more?: AsyncIterator<Buffer | string>;
}

async function readStdinHead(ctx: Ctx): Promise<StdinHead> {
  const it = (ctx.io.stdin as AsyncIterable<Buffer | string>)[Symbol.asyncIterator]();
  const chunks: Buffer[] = [];
  let size = 0;
  for (;;) {
    const next = await it.next();
    if (next.done) return { bytes: Buffer.concat(chunks) };
    const chunk = Buffer.from(next.value);
    chunks.push(chunk);
    size += chunk.length;
    if (size > MAX_EXEC_STDIN_BYTES) return { bytes: Buffer.concat(chunks), more: it };
  }
}

/** Writes each output frame to its own stream, byte-exact; resolves with the exit. */
async function forward(ctx: Ctx, frames: AsyncIterable<ExecFrame>): Promise<ExecExit> {
  for await (const frame of frames) {
    if ("stdout" in frame) await write(ctx.io.stdout, Buffer.from(frame.stdout, "base64"));
    else if ("stderr" in frame) await write(ctx.io.stderr, Buffer.from(frame.stderr, "base64"));
    else if ("exit" in frame) return frame.exit;
    else throw new ApiError(frame.error.code, frame.error.message);
  }
  throw new ApiError("unavailable", "the output stream ended before the command's exit");
}

interface Target {
  api: ApiClient;
  sessionId: string;
  signal: AbortSignal;
}

/** The common case: stdin (if any) in the body, the output streamed on the same request; leaving it kills the command. */
async function attached(ctx: Ctx, t: Target, body: ExecBody, stdin: Buffer | undefined): Promise<ExecExit> {
  const res = await t.api.open(HttpApi.exec, { params: { id: t.sessionId }, body: { ...body, ...(stdin ? { stdin: stdin.toString("base64") } : {}) } }, { accept: NDJSON, signal: t.signal });
  return forward(ctx, ndjsonOf(res, ExecFrame, "exec"));
}

/**
 * stdin past what a body may carry: the command starts in the background,
 * stdin goes through its stdin route a piece at a time (the last closing
 * it) while its output is followed. A background process outlives its
 * request, so any failure or Ctrl-C kills it here.
 */
async function background(ctx: Ctx, t: Target, body: ExecBody, stdin: StdinHead): Promise<ExecExit> {
  // A background process has no timeout of its own; the CLI's exec means the same one either way.
  const started = await t.api.open(HttpApi.exec, { params: { id: t.sessionId }, body: { ...body, timeoutMs: body.timeoutMs ?? DEFAULT_EXEC_TIMEOUT_MS, background: true } }, { signal: t.signal });
  const parsed = ExecStarted.safeParse(await started.json());
  if (!parsed.success) throw new ApiError("internal", "exec: unexpected answer to a background start");
  const params = { id: t.sessionId, processId: parsed.data.id };
  const pumping = new AbortController();
  const onAbort = () => pumping.abort();
  t.signal.addEventListener("abort", onAbort);
  let exited = false;
  // Settles only if writing stdin fails while the command runs; handled from the start, since that may come before the race below.
  const pumpFailed = pumpStdin(t.api, params, stdin, pumping.signal).then(
    () => new Promise<never>(() => undefined),
    (err: unknown) => {
      // A command that ends without reading all of its stdin is not a failure (as EPIPE in a shell pipeline).
      if (!exited && !pumping.signal.aborted) throw err;
      return new Promise<never>(() => undefined);
    },
  );
  pumpFailed.catch(() => undefined);
  try {
    const res = await t.api.open(HttpApi.readProcessOutput, { params, query: { since: 0, encoding: "base64" } }, { accept: NDJSON, signal: t.signal });
    const exit = await Promise.race([forward(ctx, ndjsonOf(res, ExecFrame, "exec output")), pumpFailed]);
    exited = true;
    return exit;
  } catch (err) {
    await t.api.call(HttpApi.signalProcess, { params, body: { signal: "SIGKILL" } }).catch(() => undefined);
    throw err;
  } finally {
    pumping.abort();
    t.signal.removeEventListener("abort", onAbort);
  }
}

/**
 * The size of one stdin write. The route takes up to MAX_EXEC_STDIN_BYTES,
 * but the gateway hands a piece to the runner as base64 in one bus message,
 * and a whole MiB (4/3 of it as base64) is past the bus's default payload
 * limit: smaller pieces pass whatever that limit.
 */
const STDIN_PIECE_BYTES = Math.min(MAX_EXEC_STDIN_BYTES, 256 * 1024);

async function pumpStdin(api: ApiClient, params: { id: string; processId: string }, stdin: StdinHead, signal: AbortSignal): Promise<void> {
  let pending = stdin.bytes;
  let done = stdin.more === undefined;
  for (;;) {
    const chunks = [pending];
    let size = pending.length;
    while (size < STDIN_PIECE_BYTES && !done && stdin.more) {
      const next = await stdin.more.next();
      if (next.done) done = true;
      else {
        const chunk = Buffer.from(next.value);
        chunks.push(chunk);
        size += chunk.length;
      }
    }
    const all = Buffer.concat(chunks);
    const piece = all.subarray(0, STDIN_PIECE_BYTES);
    pending = all.subarray(piece.length);
    const eof = done && pending.length === 0;
    await api.uploadTo(HttpApi.writeProcessStdin, { params, query: { eof: eof ? "true" : "false" } }, new Blob([piece]).stream(), signal);
    if (eof) return;
  }
}

export const execCommand: Command = {
  name: "exec",
  summary: "run a command in a running session, with its exit code",
  help: `usage: paddock exec ID [--cwd PATH] [--env NAME=VALUE]... [--timeout-ms N] [-i] -- CMD [ARG...]

Runs CMD in the session's sandbox (as its apps run: same user, limits and
network; no terminal). Its stdout and stderr are written to this command's
stdout and stderr as they come, byte for byte, and its exit code is this
command's:

  the command's own code      when it exited
  128+N                       when signal N killed it (137 for SIGKILL)
  ${EXEC_TIMEOUT_EXIT}                         when it ran past its timeout (as timeout(1))
  ${EXEC_FAILURE_EXIT}                         when exec itself failed (an API error, a lost stream)
  ${INTERRUPTED_EXIT}                         on Ctrl-C, which kills the command
  2                           for a bad invocation

  --cwd PATH            run in PATH, relative to the workspace (default: the workspace)
  -e, --env NAME=VALUE  set a variable over the session's own (repeatable;
                        PADDOCK_ names are the runner's)
  --timeout-ms N        kill the command's whole process group after N ms
                        (default ${DEFAULT_EXEC_TIMEOUT_MS}, at most ${MAX_EXEC_TIMEOUT_MS})
  -i, --interactive     pipe this command's stdin to CMD, to its end (up to
                        ${MAX_EXEC_STDIN_BYTES} bytes in the request; past that
                        in pieces to a background process). Without -i,
                        CMD's stdin is empty.

Example: paddock exec ID --cwd app -- make test
         tar c src | paddock exec ID -i -- tar x
`,
  async run(ctx, argv) {
    const args = parseCommand(ctx, this, argv, {
      cwd: { type: "string" },
      env: { type: "list", short: "e" },
      "timeout-ms": { type: "int" },
      interactive: { type: "boolean", short: "i" },
    });
    if (!args) return 0;
    const [sessionId, ...extra] = args.positionals;
    if (sessionId === undefined) throw new UsageError("paddock exec: expected ID -- CMD [ARG...]");
    if (args.rest === undefined) throw new UsageError(`paddock exec: put the command after --: paddock exec ${sessionId} -- ${extra.join(" ") || "CMD"}`);
    if (extra.length > 0) throw new UsageError(`paddock exec: unexpected ${JSON.stringify(extra[0])} before --`);
    if (args.rest.length === 0) throw new UsageError("paddock exec: expected a command after --");
    const body = bodyOf(args.flags, args.rest);
    const api = apiOf(ctx);
    const stdin = args.flags.interactive ? await readStdinHead(ctx) : undefined;

    // Ctrl-C ends the request: the gateway kills an attached command whose client left.
    const abort = new AbortController();
    const onInterrupt = () => abort.abort();
    ctx.io.signals?.on("SIGINT", onInterrupt);
    try {
      const target = { api, sessionId, signal: abort.signal };
      const exit = stdin?.more ? await background(ctx, target, body, stdin) : await attached(ctx, target, body, stdin?.bytes);
      if (exit.timedOut) notice(ctx, `the command ran past its timeout (${body.timeoutMs ?? DEFAULT_EXEC_TIMEOUT_MS} ms) and was killed`);
      return exitCodeOf(exit);
    } catch (err) {
      if (abort.signal.aborted) {
        notice(ctx, "interrupted: the command was killed");
        return INTERRUPTED_EXIT;
      }
      if (err instanceof ApiError) {
        await write(ctx.io.stderr, `error: ${err.code}: ${err.message}\n`);
        return EXEC_FAILURE_EXIT;
      }
      throw err;
    } finally {
      ctx.io.signals?.off("SIGINT", onInterrupt);
    }
  },
};
