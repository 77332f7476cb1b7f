import { setTimeout as sleep } from "node:timers/promises";
import { CreateSessionBody, describeZodError, HttpApi, MAX_WAIT_MS, SessionMode, type Session } from "@paddock/contracts";
import { apiOf, parseCommand, positionals, type Command, type Ctx } from "../command.ts";
import { json } from "../format.ts";
import { ApiError, ExitCode, UsageError, write } from "../io.ts";

/** First and longest pause between reads of a record whose operation the runner has not finished. */
const SETTLE_FIRST_MS = 100;
const SETTLE_MAX_MS = 1_000;

/**
 * The record once the runner has carried out the operation the answer left
 * pending: the API answers a pending record when the runner is slower than its
 * wait, and printing that ("ID running" after a suspend) would be a lie. The
 * scheduler clears a pending operation after its timeout, so this ends.
 */
async function settled(ctx: Ctx, answer: Session): Promise<Session> {
  const pending = answer.pending;
  if (!pending) return answer;
  for (let delayMs = SETTLE_FIRST_MS; ; delayMs = Math.min(delayMs * 2, SETTLE_MAX_MS)) {
    await sleep(delayMs);
    const now = await apiOf(ctx).call(HttpApi.getSession, { params: { id: answer.id } });
    if (now.pending?.requestId === pending.requestId) continue;
    if (now.refusal?.requestId === pending.requestId) throw new ApiError("conflict", `the runner refused: ${now.refusal.reason}`, 409);
    return now;
  }
}

/** `ID STATE`, or the record with --json. */
async function printSession(ctx: Ctx, session: Session, asJson: boolean | undefined): Promise<void> {
  await write(ctx.io.stdout, asJson ? json(session) : `${session.id} ${session.state}\n`);
}

/** `?wait=running&timeoutMs=` of `create --wait [--timeout-ms N]`; a UsageError for a bad or lone --timeout-ms. */
function waitQuery(wait: boolean, timeoutMs: string | undefined): { wait?: "running"; timeoutMs?: string } {
  if (timeoutMs !== undefined && !wait) throw new UsageError("paddock create: --timeout-ms applies only with --wait");
  if (timeoutMs !== undefined && !(/^\d{1,6}$/.test(timeoutMs) && Number(timeoutMs) <= MAX_WAIT_MS)) {
    throw new UsageError(`paddock create: --timeout-ms must be a number of ms from 0 to ${MAX_WAIT_MS}, got ${JSON.stringify(timeoutMs)}`);
  }
  return wait ? { wait: "running", ...(timeoutMs !== undefined ? { timeoutMs } : {}) } : {};
}

export const createCommand: Command = {
  name: "create",
  summary: "create a session without attaching",
  help: `usage: paddock create [--name N] [--env ENV_ID] [--one-shot] [--parent ID]
                      [--mode run|watch] [--idempotency-key K] [--json] [-- CMD [ARG...]]

Creates a session and prints its id (the record with --json). Without CMD the
session runs its environment's command, or a login shell.

  --name N               a name for the session
  --env ENV_ID           start from this environment
  --one-shot             the session ends when its command exits
  --parent ID            a child of session ID
  --mode run|watch       watch sessions are suspended when nobody is attached
  --idempotency-key K    a retry with the same key answers the same session
  --wait                 answer once the session runs; exit 1 if it cannot or
                         --timeout-ms (default 30000, at most 300000) passes
  --json                 print the session record
`,
  async run(ctx, argv) {
    const args = parseCommand(ctx, this, argv, {
      name: { type: "string" },
      env: { type: "string" },
      "one-shot": { type: "boolean" },
      parent: { type: "string" },
      mode: { type: "string" },
      "idempotency-key": { type: "string" },
      wait: { type: "boolean" },
      "timeout-ms": { type: "string" },
      json: { type: "boolean" },
    });
    if (!args) return ExitCode.ok;
    if (args.positionals.length) {
      throw new UsageError(`paddock create: unexpected ${JSON.stringify(args.positionals[0])}: put the command after -- (paddock create -- CMD...)`);
    }
    const { flags } = args;
    if (flags.mode !== undefined && !SessionMode.safeParse(flags.mode).success) {
      throw new UsageError(`paddock create: --mode must be run or watch, got ${JSON.stringify(flags.mode)}`);
    }
    const cmd = args.rest;
    if (cmd !== undefined && cmd.length === 0) throw new UsageError("paddock create: no command after --");
    const body = CreateSessionBody.safeParse({
      name: flags.name,
      environmentId: flags.env,
      oneShot: flags["one-shot"],
      parentId: flags.parent,
      mode: flags.mode,
      idempotencyKey: flags["idempotency-key"],
      spec: cmd ? { cmd } : {},
    });
    if (!body.success) throw new UsageError(`paddock create: ${describeZodError(body.error)}`);
    const query = waitQuery(flags.wait === true, flags["timeout-ms"]);
    const session = await apiOf(ctx).call(HttpApi.createSession, { body: body.data, query });
    await write(ctx.io.stdout, flags.json ? json(session) : `${session.id}\n`);
    if (query.wait === undefined || session.state === "running") return ExitCode.ok;
    const why = session.waited?.outcome === "timeout" ? "timed out waiting for it to run" : "it will not run";
    await write(ctx.io.stderr, `paddock create: session ${session.id} is ${session.state}: ${why}\n`);
    return ExitCode.failure;
  },
};

export const suspendCommand: Command = {
  name: "suspend",
  summary: "suspend a session (cold by default, --warm keeps it in place)",
  help: `usage: paddock suspend ID [--warm] [--json]

Suspends a running session and prints "ID STATE" (the record with --json) once
the runner has done it.
Cold (default): a checkpoint is taken and the sandbox removed; its slot is freed.
  --warm   stop the processes in place and keep the slot (fast to resume)
`,
  async run(ctx, argv) {
    const args = parseCommand(ctx, this, argv, { warm: { type: "boolean" }, json: { type: "boolean" } });
    if (!args) return ExitCode.ok;
    const [id = ""] = positionals(this, args.positionals, ["id"]);
    const session = await apiOf(ctx).call(HttpApi.suspendSession, { params: { id }, body: { warm: args.flags.warm === true } });
    await printSession(ctx, await settled(ctx, session), args.flags.json);
    return ExitCode.ok;
  },
};

export const resumeCommand: Command = {
  name: "resume",
  summary: "resume a suspended session",
  help: `usage: paddock resume ID [--json]

Resumes a suspended session and prints "ID STATE" (the record with --json). A
cold one is queued for placement on any runner of its pool and restored.
`,
  async run(ctx, argv) {
    const args = parseCommand(ctx, this, argv, { json: { type: "boolean" } });
    if (!args) return ExitCode.ok;
    const [id = ""] = positionals(this, args.positionals, ["id"]);
    const session = await apiOf(ctx).call(HttpApi.resumeSession, { params: { id }, body: {} });
    await printSession(ctx, await settled(ctx, session), args.flags.json);
    return ExitCode.ok;
  },
};

export const snapshotCommand: Command = {
  name: "snapshot",
  summary: "checkpoint a running session",
  help: `usage: paddock snapshot ID [--json]

Checkpoints the session's workspace without stopping it and prints the
checkpoint's ref (the checkpoint {ref, format, capabilities} with --json).
A large workspace can take longer than one call: the gateway then answers
202 and the command waits on GET /v1/sessions/ID/snapshots/REQUEST until
the checkpoint is taken (or refused: exit 1 with the runner's reason).
`,
  async run(ctx, argv) {
    const args = parseCommand(ctx, this, argv, { json: { type: "boolean" } });
    if (!args) return ExitCode.ok;
    const [id = ""] = positionals(this, args.positionals, ["id"]);
    const api = apiOf(ctx);
    let answer = await api.call(HttpApi.snapshotSession, { params: { id }, body: {} });
    while ("requestId" in answer) answer = await api.call(HttpApi.getSnapshot, { params: { id, requestId: answer.requestId } });
    const checkpoint = answer;
    await write(ctx.io.stdout, args.flags.json ? json(checkpoint) : `${checkpoint.ref}\n`);
    return ExitCode.ok;
  },
};

export const recycleCommand: Command = {
  name: "recycle",
  summary: "release a session and start a fresh one with the same spec",
  help: `usage: paddock recycle ID [--json]

Releases the session and creates a fresh one with the same spec; prints the
new session's id ({released, session} with --json).
`,
  async run(ctx, argv) {
    const args = parseCommand(ctx, this, argv, { json: { type: "boolean" } });
    if (!args) return ExitCode.ok;
    const [id = ""] = positionals(this, args.positionals, ["id"]);
    const answer = await apiOf(ctx).call(HttpApi.recycleSession, { params: { id }, body: {} });
    await write(ctx.io.stdout, args.flags.json ? json(answer) : `${answer.session.id}\n`);
    return ExitCode.ok;
  },
};

export const restartCommand: Command = {
  name: "restart",
  summary: "restart one app of a session",
  help: `usage: paddock restart ID APP [--json]

Starts the next generation of app APP and prints "ID APP generation N" once
it started, or "ID APP restart pending" when the runner has not answered in
time (the session record with --json).
`,
  async run(ctx, argv) {
    const args = parseCommand(ctx, this, argv, { json: { type: "boolean" } });
    if (!args) return ExitCode.ok;
    const [id = "", app = ""] = positionals(this, args.positionals, ["id", "app"]);
    const session = await apiOf(ctx).call(HttpApi.restartApp, { params: { id, app }, body: {} });
    const generation = session.apps?.[app]?.generation;
    // The answer shows the new generation once the runner started it; before that, the old one is not the answer.
    const pending = session.pending?.op === "restart_app";
    if (args.flags.json) await write(ctx.io.stdout, json(session));
    else if (pending) await write(ctx.io.stdout, `${session.id} ${app} restart pending\n`);
    else await write(ctx.io.stdout, generation === undefined ? `${session.id} ${session.state}\n` : `${session.id} ${app} generation ${String(generation)}\n`);
    return ExitCode.ok;
  },
};
