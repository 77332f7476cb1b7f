/**
 * `new Paddock({ baseUrl, token })`: sessions, environments, exec, files,
 * events, agents, terminals, webhooks — each method one route of the HTTP
 * contract, typed by it.
 */
import {
  AuditEntry,
  ExecFrame,
  HttpApi,
  type BodyInput,
  type Checkpoint,
  type Environment,
  type ExecResult,
  type JsonAnswer,
  type Session,
  type SessionState,
} from "@paddock/contracts";
import { Agents } from "./agents.ts";
import { apiError, type PaddockApiError } from "./errors.ts";
import { Webhooks } from "./webhooks.ts";
import { Terminal, type AttachOptions } from "./terminal.ts";
import { ndjson, Transport, type CallInput, type PaddockOptions } from "./transport.ts";

const NDJSON = "application/x-ndjson";

/** Options every call takes. */
export interface CallOptions {
  readonly signal?: AbortSignal;
}

/** A random idempotency key (web crypto: browsers, edge runtimes and Node alike). */
function idempotencyKey(): string {
  return `sdk-${globalThis.crypto.randomUUID()}`;
}

export class Paddock {
  readonly transport: Transport;
  readonly sessions: Sessions;
  readonly environments: Environments;
  readonly exec: Exec;
  readonly files: Files;
  readonly events: Events;
  readonly agents: Agents;
  readonly terminal: Terminals;
  readonly webhooks: Webhooks;

  constructor(opts: PaddockOptions) {
    this.transport = new Transport(opts);
    this.sessions = new Sessions(this.transport);
    this.environments = new Environments(this.transport);
    this.exec = new Exec(this.transport);
    this.files = new Files(this.transport);
    this.events = new Events(this.transport);
    this.agents = new Agents(this.transport);
    this.terminal = new Terminals(this.transport);
    this.webhooks = new Webhooks(this.transport);
  }
}

export type CreateSessionInput = BodyInput<typeof HttpApi.createSession>;

export class Sessions {
  constructor(private readonly t: Transport) {}

  /**
   * Creates a session. It always carries an idempotency key (yours, or one
   * made here), so a create retried after a lost answer never makes two.
   * `wait: "running"` answers once it runs (or cannot; see `waited`).
   */
  create(body: CreateSessionInput, opts: CallOptions & { wait?: SessionState; timeoutMs?: number } = {}): Promise<JsonAnswer<typeof HttpApi.createSession>> {
    const keyed = { ...body, idempotencyKey: body.idempotencyKey ?? idempotencyKey() } as CreateSessionInput;
    return this.t.call(HttpApi.createSession, { body: keyed, query: { wait: opts.wait, timeoutMs: opts.timeoutMs }, signal: opts.signal }, { retry: true });
  }

  /** Its CPU, memory, disk and network samples (the last hour of its current placement; none without a live sandbox). */
  metrics(id: string, opts: CallOptions = {}): Promise<JsonAnswer<typeof HttpApi.getSessionMetrics>> {
    return this.t.call(HttpApi.getSessionMetrics, { params: { id }, signal: opts.signal });
  }

  get(id: string, opts: CallOptions & { waitFor?: SessionState; timeoutMs?: number } = {}): Promise<JsonAnswer<typeof HttpApi.getSession>> {
    return this.t.call(HttpApi.getSession, { params: { id }, query: { waitFor: opts.waitFor, timeoutMs: opts.timeoutMs }, signal: opts.signal });
  }

  /** Every session (page after page, as they are read). */
  async *list(query: CallInput<typeof HttpApi.listSessions>["query"] = {}, opts: CallOptions = {}): AsyncGenerator<Session> {
    let cursor: string | undefined;
    do {
      const page = await this.t.call(HttpApi.listSessions, { query: { ...query, cursor }, signal: opts.signal });
      yield* page.sessions;
      cursor = page.nextCursor;
    } while (cursor);
  }

  /** Deletes a session; `wait: "destroyed"` answers once its sandbox is gone (or timeoutMs passed: see `waited`). */
  delete(id: string, opts: CallOptions & { wait?: SessionState; timeoutMs?: number } = {}): Promise<JsonAnswer<typeof HttpApi.deleteSession>> {
    return this.t.call(HttpApi.deleteSession, { params: { id }, query: { wait: opts.wait, timeoutMs: opts.timeoutMs }, signal: opts.signal });
  }

  suspend(id: string, warm: boolean, opts: CallOptions & { wait?: SessionState; timeoutMs?: number } = {}): Promise<JsonAnswer<typeof HttpApi.suspendSession>> {
    return this.t.call(HttpApi.suspendSession, { params: { id }, body: { warm }, query: { wait: opts.wait, timeoutMs: opts.timeoutMs }, signal: opts.signal });
  }

  resume(id: string, opts: CallOptions & { wait?: SessionState; timeoutMs?: number } = {}): Promise<JsonAnswer<typeof HttpApi.resumeSession>> {
    return this.t.call(HttpApi.resumeSession, { params: { id }, body: {}, query: { wait: opts.wait, timeoutMs: opts.timeoutMs }, signal: opts.signal });
  }

  /**
   * Checkpoints the session's workspace; answers the checkpoint once taken.
   * A snapshot the runner has not finished within one call (a large
   * workspace: 202) is waited for on its request, call after call, until it
   * is taken, refused (a `conflict`) or opts.signal aborts.
   */
  async snapshot(id: string, opts: CallOptions = {}): Promise<Checkpoint> {
    let answer = await this.t.call(HttpApi.snapshotSession, { params: { id }, body: {}, signal: opts.signal });
    while ("requestId" in answer) answer = await this.t.call(HttpApi.getSnapshot, { params: { id, requestId: answer.requestId }, signal: opts.signal });
    return answer;
  }
}

export class Environments {
  constructor(private readonly t: Transport) {}

  create(body: BodyInput<typeof HttpApi.createEnvironment>, opts: CallOptions = {}): Promise<JsonAnswer<typeof HttpApi.createEnvironment>> {
    return this.t.call(HttpApi.createEnvironment, { body, signal: opts.signal });
  }

  /** Every environment (page after page, as they are read). */
  async *list(opts: CallOptions = {}): AsyncGenerator<Environment> {
    let cursor: string | undefined;
    do {
      const page = await this.t.call(HttpApi.listEnvironments, { query: { cursor }, signal: opts.signal });
      yield* page.environments;
      cursor = page.nextCursor;
    } while (cursor);
  }

  get(id: string, opts: CallOptions = {}): Promise<JsonAnswer<typeof HttpApi.getEnvironment>> {
    return this.t.call(HttpApi.getEnvironment, { params: { id }, signal: opts.signal });
  }

  update(id: string, body: BodyInput<typeof HttpApi.updateEnvironment>, opts: CallOptions = {}): Promise<JsonAnswer<typeof HttpApi.updateEnvironment>> {
    return this.t.call(HttpApi.updateEnvironment, { params: { id }, body, signal: opts.signal });
  }

  delete(id: string, opts: CallOptions = {}): Promise<JsonAnswer<typeof HttpApi.deleteEnvironment>> {
    return this.t.call(HttpApi.deleteEnvironment, { params: { id }, signal: opts.signal });
  }
}

export type ExecInput = BodyInput<typeof HttpApi.exec>;

export class Exec {
  constructor(private readonly t: Transport) {}

  /** Runs a command to its end: exit code or signal, stdout and stderr apart (each cut at the documented cap: `truncated`). */
  async run(sessionId: string, body: ExecInput, opts: CallOptions = {}): Promise<ExecResult> {
    const answer = await this.t.call(HttpApi.exec, { params: { id: sessionId }, body: { ...body, background: false }, signal: opts.signal });
    if (!("exitCode" in answer)) throw apiError("internal", "a buffered exec was answered as a background start", 202);
    return answer as ExecResult;
  }

  /** The command's output as it happens (`{stdout}`/`{stderr}` frames, then `{exit}`); leaving the loop early kills it. */
  async *stream(sessionId: string, body: ExecInput, opts: CallOptions = {}): AsyncGenerator<ExecFrame> {
    const res = await this.t.send(HttpApi.exec, { params: { id: sessionId }, body: { ...body, background: false }, signal: opts.signal }, { accept: NDJSON });
    yield* ndjson(res, ExecFrame, "exec");
  }
}

export class Files {
  constructor(private readonly t: Transport) {}

  async read(sessionId: string, path: string, opts: CallOptions = {}): Promise<Uint8Array> {
    const res = await this.t.send(HttpApi.readFile, { params: { id: sessionId }, query: { path }, signal: opts.signal }, { accept: "application/octet-stream" });
    return new Uint8Array(await res.arrayBuffer());
  }

  write(sessionId: string, path: string, bytes: Uint8Array | string, opts: CallOptions = {}): Promise<JsonAnswer<typeof HttpApi.writeFile>> {
    const raw = typeof bytes === "string" ? new TextEncoder().encode(bytes) : bytes;
    return this.t.call(HttpApi.writeFile, { params: { id: sessionId }, query: { path }, signal: opts.signal }, { raw: raw as NonNullable<RequestInit["body"]> });
  }

  list(sessionId: string, path: string, opts: CallOptions = {}): Promise<JsonAnswer<typeof HttpApi.listFiles>> {
    return this.t.call(HttpApi.listFiles, { params: { id: sessionId }, query: { path }, signal: opts.signal });
  }

  remove(sessionId: string, path: string, opts: CallOptions = {}): Promise<JsonAnswer<typeof HttpApi.deleteFile>> {
    return this.t.call(HttpApi.deleteFile, { params: { id: sessionId }, query: { path }, signal: opts.signal });
  }
}

export interface FollowOptions extends CallOptions {
  readonly sessionId?: string;
  /** After this sequence, or `now` (only what happens next); default: everything retained. */
  readonly since?: number | "now";
  /** Events stored at or after this time (epoch ms) instead. */
  readonly startTime?: number;
}

export class Events {
  constructor(private readonly t: Transport) {}

  list(query: CallInput<typeof HttpApi.listEvents>["query"] = {}, opts: CallOptions = {}): Promise<JsonAnswer<typeof HttpApi.listEvents>> {
    return this.t.call(HttpApi.listEvents, { query, signal: opts.signal });
  }

  /**
   * The audit events, then live, until `signal` aborts. A dropped stream
   * (a gateway restart, the network) is resumed after the last event's
   * `seq`: nothing lost, nothing repeated. Errors a retry cannot fix are thrown.
   */
  async *follow(opts: FollowOptions = {}): AsyncGenerator<AuditEntry> {
    let cursor: number | undefined;
    for (let attempt = 0; !opts.signal?.aborted; ) {
      const start = cursor !== undefined ? { since: cursor } : opts.startTime !== undefined ? { startTime: opts.startTime } : opts.since !== undefined ? { since: opts.since } : {};
      try {
        const res = await this.t.send(HttpApi.listEvents, { query: { follow: true, sessionId: opts.sessionId, ...start }, signal: opts.signal }, { accept: NDJSON });
        attempt = 0;
        for await (const e of ndjson(res, AuditEntry, "events")) {
          cursor = e.seq;
          yield e;
        }
      } catch (err) {
        if (opts.signal?.aborted) return;
        if (!(err as PaddockApiError).retryable) throw err;
      }
      await this.t.backoff(attempt++, opts.signal);
    }
  }
}

export class Terminals {
  constructor(private readonly t: Transport) {}

  /** Attaches to a session's terminal (viewer unless `mode: "controller"`): iterate it for output; `send` and `resize` as a controller. */
  attach(sessionId: string, opts: AttachOptions = {}): Promise<Terminal> {
    return new Terminal(this.t, sessionId, opts).open();
  }
}
