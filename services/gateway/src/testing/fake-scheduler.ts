/**
 * A stand-in for the scheduler's Api rpcs for the gateway tests: in-memory
 * records, every call recorded. It answers like the scheduler's contract, not
 * its policy: a state change the contract forbids (canTransition) is a
 * conflict, a PATCH is the contract's applyEnvironmentPatch; placement, quotas
 * and runner checks are the scheduler's business. Used by *.test.ts only.
 */
import type { NatsConnection, Subscription } from "@nats-io/transport-node";
import { createBusMetrics, serveRpc } from "@paddock/bus";
import type { z } from "zod";
import {
  Api,
  applyEnvironmentPatch,
  canTransition,
  ConflictError,
  NotFoundError,
  type Environment,
  type Rpc,
  type Runner,
  type Scope,
  type Session,
  type SessionState,
  Subjects,
} from "@paddock/contracts";
import { silentLogger } from "@paddock/logging";
import { FIXTURE_NOW, makeEnvironment, makeRunner, makeSession } from "@paddock/testing";

export { makeEnvironment, makeRunner, makeSession };

export const NOW = FIXTURE_NOW;

export interface RpcCall {
  verb: string;
  request: unknown;
}

export class FakeScheduler {
  readonly sessions = new Map<string, Session>();
  readonly environments = new Map<string, Environment>();
  /** Fleet-wide, by runner id (the real KV key is `<pool>.<runner>`); starts with RUNNER. */
  readonly runners = new Map<string, Runner>([[RUNNER.id, RUNNER]]);
  readonly calls: RpcCall[] = [];
  /** Runs once an attach is answered (its reply already decided): lets a test move the record on meanwhile. */
  afterAttach: ((granted: Session) => void) | undefined;
  private subs: Subscription[] = [];
  private callWaiters: Array<{ verb: string; resolve: (call: RpcCall) => void }> = [];
  /** Verbs whose answers wait until the test releases them (hold). */
  private readonly gates = new Map<string, Promise<void>>();
  private n = 0;
  private readonly idem = new Map<string, string>();

  constructor(private readonly nc: NatsConnection) {}

  start(): void {
    const opts = { queue: "scheduler", metrics: createBusMetrics(), log: silentLogger() };
    const key = (scope: Scope, id: string) => `${scope.workspaceId}.${id}`;
    const get = (scope: Scope, id: string) => {
      const s = this.sessions.get(key(scope, id));
      if (!s) throw new NotFoundError("session");
      return s;
    };
    const getEnv = (scope: Scope, id: string) => {
      const e = this.environments.get(key(scope, id));
      if (!e) throw new NotFoundError("environment");
      return e;
    };
    /** Records the call, then answers. */
    const serve = <R extends Rpc<z.ZodType, z.ZodType>>(verb: string, rpc: R, fn: (req: z.infer<R["request"]>) => z.input<R["result"]>) =>
      serveRpc(this.nc, rpc, async (req) => {
        await this.record(verb, req);
        return fn(req);
      }, opts);

    this.subs = [
      serve("create", Api.createSession, (req) => {
        const idemKey = req.body.idempotencyKey ? `${req.scope.workspaceId}.${req.body.idempotencyKey}` : undefined;
        const prior = idemKey ? this.idem.get(idemKey) : undefined;
        if (prior) return { session: get(req.scope, prior), replayed: true };
        const parentId = req.scope.sessionId ?? req.body.parentId;
        const s = this.put(
          makeSession({
            id: `s${++this.n}`,
            workspaceId: req.scope.workspaceId,
            creatorId: req.scope.actor.id,
            spec: req.body.spec,
            ...(parentId !== undefined ? { parentId } : {}),
          }),
        );
        if (idemKey) this.idem.set(idemKey, s.id);
        return { session: s, replayed: false };
      }),
      serve("list", Api.listSessions, (req) => {
        const all = [...this.sessions.values()].filter((s) => s.workspaceId === req.scope.workspaceId);
        return { sessions: all.slice(0, req.limit), ...(all.length > req.limit ? { nextCursor: "next" } : {}) };
      }),
      serve("delete", Api.deleteSession, (req) => {
        const s = get(req.scope, req.sessionId);
        // Not started yet: canceled; otherwise torn down.
        return { session: this.moveTo(s, canTransition(s.state, "canceled") ? "canceled" : "destroyed") };
      }),
      serve("attach", Api.attachSession, (req) => {
        const s = get(req.scope, req.sessionId);
        const granted = req.mode === "viewer" ? s : this.put({ ...s, controllerGeneration: s.controllerGeneration + 1 });
        this.afterAttach?.(granted);
        return { session: granted };
      }),
      serve("suspend", Api.suspendSession, (req) => ({
        session: this.moveTo(get(req.scope, req.sessionId), req.warm ? "suspended_warm" : "suspended_cold"),
      })),
      serve("resume", Api.resumeSession, (req) => {
        const s = get(req.scope, req.sessionId);
        return { session: this.moveTo(s, s.state === "suspended_cold" ? "queued" : "running") };
      }),
      serve("snapshot", Api.snapshotSession, (req) => {
        const s = get(req.scope, req.sessionId);
        const checkpoint = { ref: `checkpoints/${s.workspaceId}/${s.id}-1`, format: "tar+gzip", capabilities: ["portable"] };
        const requestId = `req${++this.n}`;
        return { requestId, checkpoint, session: this.put({ ...s, checkpoint, checkpointedAt: NOW, snapshot: { requestId, checkpoint, at: NOW } }) };
      }),
      serve("recycle", Api.recycleSession, (req) => {
        const s = get(req.scope, req.sessionId);
        const released = this.moveTo(s, "destroyed");
        const fresh = this.put(makeSession({ id: `s${++this.n}`, workspaceId: s.workspaceId, creatorId: s.creatorId, spec: s.spec, state: "queued" }));
        return { released, session: fresh };
      }),
      serve("restartApp", Api.restartApp, (req) => {
        const s = get(req.scope, req.sessionId);
        const generation = (s.apps?.[req.app]?.generation ?? 1) + 1;
        return { session: this.put({ ...s, apps: { ...s.apps, [req.app]: { generation, phase: "running", trigger: "manual", startedAt: NOW } } }) };
      }),
      serve("recordTransfer", Api.recordTransfer, (req) => ({ session: get(req.scope, req.sessionId) })),
      serve("createEnvironment", Api.createEnvironment, (req) => ({
        environment: this.putEnv(
          patchEnvironment(makeEnvironment({ id: `env${++this.n}`, workspaceId: req.scope.workspaceId, name: req.body.name }), req.body, NOW),
        ),
      })),
      serve("getEnvironment", Api.getEnvironment, (req) => ({
        environment: getEnv(req.scope, req.environmentId),
      })),
      serve("listEnvironments", Api.listEnvironments, (req) => {
        const all = [...this.environments.values()].filter((e) => e.workspaceId === req.scope.workspaceId);
        return { environments: all.slice(0, req.limit), ...(all.length > req.limit ? { nextCursor: "next" } : {}) };
      }),
      serve("updateEnvironment", Api.updateEnvironment, (req) => ({
        environment: this.putEnv(patchEnvironment(getEnv(req.scope, req.environmentId), req.body, NOW + 1)),
      })),
      serve("deleteEnvironment", Api.deleteEnvironment, (req) => {
        const e = getEnv(req.scope, req.environmentId);
        this.environments.delete(key(req.scope, e.id));
        return { environment: e };
      }),
      serve("listRunners", Api.listRunners, (req) => {
        // The cursor is an offset here; the scheduler's is opaque to the gateway either way.
        const all = [...this.runners.values()];
        const from = req.cursor === undefined ? 0 : Number(req.cursor);
        const next = from + req.limit < all.length ? String(from + req.limit) : undefined;
        return { runners: all.slice(from, from + req.limit), ...(next !== undefined ? { nextCursor: next } : {}) };
      }),
      serve("setRunnerState", Api.setRunnerState, (req) => {
        const r = this.runners.get(req.runnerId);
        if (!r) throw new NotFoundError("runner");
        return { runner: this.putRunner({ ...r, state: req.state }) };
      }),
    ];
  }

  stop(): void {
    for (const s of this.subs) s.unsubscribe();
    this.subs = [];
  }

  /** A state change, if the contract allows it (the scheduler answers the same conflict); the same state is a no-op. */
  moveTo(s: Session, to: SessionState): Session {
    if (s.state === to) return s;
    if (!canTransition(s.state, to)) throw new ConflictError(`session ${s.id} cannot go from ${s.state} to ${to}`);
    return this.put({ ...s, state: to });
  }

  /** Holds the answers to verb's calls (each recorded at once) until the returned release is called. */
  hold(verb: string): () => void {
    let release!: () => void;
    this.gates.set(verb, new Promise((resolve) => (release = resolve)));
    return () => {
      this.gates.delete(verb);
      release();
    };
  }

  /** The next call of verb this stand-in receives (from now on). */
  nextCall(verb: string): Promise<RpcCall> {
    return new Promise((resolve) => this.callWaiters.push({ verb, resolve }));
  }

  /**
   * A committed state change, as the scheduler makes one: the record, then an
   * event on the session's AUDIT subject. Its body is left empty here: the
   * gateway's followers (presence, waits) read the record again on any event.
   */
  commit(s: Session, to: SessionState): Session {
    const next = this.moveTo(s, to);
    this.nc.publish(Subjects.audit(s.workspaceId, "session", s.id));
    return next;
  }

  /**
   * The gateway's read of a stored session record (GatewayDeps.readSession,
   * which reads the sessions KV in production): recorded as a "get" call,
   * held by hold("get") like the scheduler's rpcs.
   */
  readonly readRecord = async (workspaceId: string, sessionId: string): Promise<Session | undefined> => {
    await this.record("get", { workspaceId, sessionId });
    return this.sessions.get(`${workspaceId}.${sessionId}`);
  };

  /** Records a call (waking its waiters), then waits while its verb is held. */
  private async record(verb: string, request: unknown): Promise<void> {
    const call = { verb, request };
    this.calls.push(call);
    for (const w of this.callWaiters.filter((x) => x.verb === verb)) w.resolve(call);
    this.callWaiters = this.callWaiters.filter((x) => x.verb !== verb);
    await this.gates.get(verb);
  }

  put(s: Session): Session {
    this.sessions.set(`${s.workspaceId}.${s.id}`, s);
    return s;
  }

  putEnv(e: Environment): Environment {
    this.environments.set(`${e.workspaceId}.${e.id}`, e);
    return e;
  }

  putRunner(r: Runner): Runner {
    this.runners.set(r.id, r);
    return r;
  }

  callsOf(verb: string): RpcCall[] {
    return this.calls.filter((c) => c.verb === verb);
  }
}

/** The runner the fake fleet starts with (and makeSession places sessions on). */
export const RUNNER: Runner = makeRunner({ id: "r1" });

/** PATCH of an environment as the contract defines it, stamped `at`. */
function patchEnvironment(e: Environment, body: z.infer<typeof Api.updateEnvironment.request>["body"], at: number): Environment {
  return { ...applyEnvironmentPatch(e, body), updatedAt: at };
}
