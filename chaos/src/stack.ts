import { randomBytes } from "node:crypto";
import { chmodSync, createWriteStream, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, type WriteStream } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import {
  freePort,
  startNatsCluster,
  startNatsServer,
  startService,
  type NatsClusterHandle,
  type NatsServerHandle,
  type ServiceName,
  type ServiceProcess,
} from "@paddock/testing";

/**
 * Short leases and fast sweeps so faults play out in seconds (defaults: 10 s
 * lease + 20 s grace), as the e2e fault tests use; periodic checkpoints off so
 * the only checkpoints are the ones a scenario asks for.
 */
/** Where the chaos stack's gateway serves previews by host (fuzz-preview.ts). */
export const CHAOS_PREVIEW_HOST = "preview.chaos";

export const FAST_ENV: Partial<Record<ServiceName, Record<string, string>>> = {
  scheduler: {
    PADDOCK_SCHEDULER_TICK_MS: "200",
    PADDOCK_RUNNER_LEASE_TTL_MS: "2000",
    PADDOCK_RUNNER_LOST_GRACE_MS: "1000",
    PADDOCK_REDISPATCH_AFTER_MS: "1000",
    PADDOCK_CAPACITY_REPAIR_QUIET_MS: "2000",
    PADDOCK_CREATING_TIMEOUT_MS: "20000",
    PADDOCK_PENDING_TIMEOUT_MS: "15000",
    PADDOCK_CHECKPOINT_INTERVAL_MS: "0",
    PADDOCK_MAX_SESSIONS_PER_WORKSPACE: "100000",
    PADDOCK_MAX_SESSIONS_PER_USER: "100000",
  },
  "runner-agent": { PADDOCK_RUNNER_LEASE_TTL_MS: "2000", PADDOCK_RUNNER_LEASE_RENEW_MS: "400", PADDOCK_RUNNER_KILL_GRACE_MS: "1000", PADDOCK_RUNNER_HELD_CHECK_MS: "2000" },
  // Webhooks to the harness's receiver on loopback (bad-input's fixture webhook).
  gateway: { PADDOCK_CREATES_PER_MINUTE: "1000000", PADDOCK_WS_INPUT_FRAMES_PER_SECOND: "100000", PADDOCK_PREVIEW_ORIGIN: `http://${CHAOS_PREVIEW_HOST}`, PADDOCK_WEBHOOK_ALLOW_PRIVATE: "1" },
  "event-recorder": { PADDOCK_WEBHOOK_ALLOW_PRIVATE: "1" },
};

export interface Member {
  /** "scheduler", "event-recorder", "gateway" (a replica: "scheduler-2", …) or the runner id. */
  id: string;
  role: ServiceName;
  env: Record<string, string>;
  proc: ServiceProcess | undefined;
  /** Set while the harness itself stops or kills the process: its exit is not a crash. */
  expectingExit: boolean;
  starts: number;
}

export interface Crash {
  id: string;
  code: number | null;
  signal: NodeJS.Signals | null;
  at: number;
}

export interface ChaosStackOptions {
  runners: number;
  capacity?: number;
  /** A 3-node cluster with R3 streams and buckets instead of one server. */
  cluster?: boolean;
  env?: Partial<Record<ServiceName, Record<string, string>>>;
  /** Replicas of each control-plane service (default 1 each): members `scheduler-2`, `gateway-2` (its own port), …. */
  replicas?: { scheduler?: number; recorder?: number; gateway?: number };
}

/** The whole system as OS processes, where any member can be killed, stopped or restarted as itself. */
export class ChaosStack {
  readonly members = new Map<string, Member>();
  /** Service processes that exited without the harness asking. */
  readonly crashes: Crash[] = [];
  readonly runnerIds: string[] = [];
  /** The control-plane members (every replica), in start order. */
  readonly controlPlane: string[] = [];
  /** Every gateway's base URL; `url` is the first one's. */
  readonly gatewayUrls: string[] = [];
  /** Starts that exited before ready and were retried (with the reason's first line). */
  readonly startFailures: string[] = [];
  private readonly logs = new Map<string, WriteStream>();

  private constructor(
    readonly dataDir: string,
    readonly natsUrls: string,
    readonly url: string,
    readonly token: string,
    readonly nats: NatsServerHandle | undefined,
    readonly cluster: NatsClusterHandle | undefined,
  ) {}

  static async start(opts: ChaosStackOptions): Promise<ChaosStack> {
    const dataDir = mkdtempSync(join(tmpdir(), "paddock-chaos-"));
    // Passable (not listable): a bwrap runner's sessions bind their directories below it as their own uid.
    chmodSync(dataDir, 0o711);
    mkdirSync(join(dataDir, "logs"), { mode: 0o700 });
    const cluster = opts.cluster ? await startNatsCluster({ dir: join(dataDir, "nats") }) : undefined;
    const nats = cluster ? undefined : await startNatsServer({ storeDir: join(dataDir, "nats") });
    const natsUrls = cluster?.urls ?? nats?.url ?? "";
    const httpPort = await freePort();
    const token = `pdk_dev_${randomBytes(18).toString("hex")}`;
    const stack = new ChaosStack(dataDir, natsUrls, `http://127.0.0.1:${httpPort}`, token, nats, cluster);
    const common: Record<string, string> = {
      PADDOCK_NATS_URL: natsUrls,
      PADDOCK_LOG_LEVEL: "info",
      PADDOCK_OPS_PORT: "0",
      PADDOCK_REPLICAS: cluster ? "3" : "1",
    };
    const envOf = (role: ServiceName, own: Record<string, string>) => ({ ...common, ...FAST_ENV[role], ...opts.env?.[role], ...own });
    // Replicas share what must agree (the session-token secret, the dev token); each gateway has its own port.
    const tokenSecret = randomBytes(24).toString("hex");
    const named = (base: string, i: number) => (i === 1 ? base : `${base}-${i}`);
    for (let i = 1; i <= (opts.replicas?.scheduler ?? 1); i++) stack.defineControl(named("scheduler", i), "scheduler", envOf("scheduler", { PADDOCK_SESSION_TOKEN_SECRET: tokenSecret }));
    for (let i = 1; i <= (opts.replicas?.recorder ?? 1); i++) stack.defineControl(named("event-recorder", i), "event-recorder", envOf("event-recorder", {}));
    for (let i = 1; i <= (opts.replicas?.gateway ?? 1); i++) {
      const port = i === 1 ? httpPort : await freePort();
      stack.gatewayUrls.push(`http://127.0.0.1:${port}`);
      stack.defineControl(named("gateway", i), "gateway", envOf("gateway", { PADDOCK_HTTP_PORT: String(port), PADDOCK_DEV_TOKEN: token }));
    }
    for (let i = 1; i <= opts.runners; i++) {
      const id = `runner-${i}`;
      stack.runnerIds.push(id);
      stack.define(
        id,
        "runner-agent",
        envOf("runner-agent", {
          PADDOCK_GATEWAY_URL: stack.url,
          PADDOCK_RUNNER_ID: id,
          PADDOCK_POOL_ID: "default",
          PADDOCK_RUNNER_CAPACITY: String(opts.capacity ?? 16),
          PADDOCK_RUNNER_DATA_DIR: stack.runnerDir(id),
          PADDOCK_SANDBOX_SHARED_DIRS: stack.obsDir,
        }),
      );
    }
    try {
      // Control plane first (the runners register with the scheduler), each group in parallel.
      await Promise.all(stack.controlPlane.map((id) => stack.startWithRetries(id)));
      await Promise.all(stack.runnerIds.map((id) => stack.startWithRetries(id)));
    } catch (err) {
      await stack.stop({ keepData: true });
      throw err;
    }
    return stack;
  }

  private defineControl(id: string, role: ServiceName, env: Record<string, string>): void {
    this.controlPlane.push(id);
    this.define(id, role, env);
  }

  private define(id: string, role: ServiceName, env: Record<string, string>): void {
    this.members.set(id, { id, role, env, proc: undefined, expectingExit: false, starts: 0 });
  }

  /** One more runner-agent member, as runner-1 with env over it; not in runnerIds (scenarios counting runners see the stack's own). */
  defineRunner(id: string, env: Record<string, string>): void {
    const base = this.member(this.runnerIds[0] ?? "runner-1").env;
    this.define(id, "runner-agent", { ...base, ...env, PADDOCK_RUNNER_ID: id, PADDOCK_RUNNER_DATA_DIR: this.runnerDir(id) });
  }

  member(id: string): Member {
    const m = this.members.get(id);
    if (!m) throw new Error(`no member ${id}`);
    return m;
  }

  runnerDir(id: string): string {
    return join(this.dataDir, id);
  }

  /**
   * Where sessions record what they saw (markers.ts): shared into every bwrap
   * session (PADDOCK_SANDBOX_SHARED_DIRS), writable by each uid, and outside
   * the data dir, whose every path the sandbox case's escape battery probes.
   */
  readonly obsDir = sharedObsDir();

  /** Starts (or restarts) a member as itself: same env, data dir and port; resolves once it logged ready. */
  async startMember(id: string): Promise<ServiceProcess> {
    const m = this.member(id);
    if (m.proc && m.proc.process.exitCode === null && m.proc.process.signalCode === null) throw new Error(`${id} is running`);
    let log = this.logs.get(id);
    if (!log) {
      log = createWriteStream(join(this.dataDir, "logs", `${id}.log`), { flags: "a" });
      this.logs.set(id, log);
    }
    m.starts += 1;
    m.expectingExit = false;
    let proc: ServiceProcess;
    try {
      proc = await startService(m.role, m.env, { logTo: log });
    } catch (err) {
      // The output went to the log file: quote its end.
      await new Promise((r) => setTimeout(r, 100));
      const file = join(this.dataDir, "logs", `${id}.log`);
      const tail = existsSync(file) ? readFileSync(file, "utf8").slice(-1500) : "";
      throw new Error(`${err instanceof Error ? err.message : String(err)}${tail}`);
    }
    m.proc = proc;
    proc.exited.then(
      (code) => {
        if (!m.expectingExit && m.proc === proc) this.crashes.push({ id, code, signal: proc.process.signalCode, at: Date.now() });
      },
      () => undefined,
    );
    return proc;
  }

  /**
   * Starts a member, starting it again when it exits before ready (as an
   * orchestrator would); such exits are counted in `startFailures`.
   */
  async startWithRetries(id: string, attempts = 3): Promise<ServiceProcess> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.startMember(id);
      } catch (err) {
        if (attempt >= attempts) throw err;
        this.startFailures.push(`${id}: ${(err instanceof Error ? err.message : String(err)).split("\n")[0] ?? ""}`);
      }
    }
  }

  isUp(id: string): boolean {
    const p = this.members.get(id)?.proc;
    return p !== undefined && p.process.exitCode === null && p.process.signalCode === null;
  }

  pid(id: string): number {
    const pid = this.member(id).proc?.process.pid;
    if (pid === undefined) throw new Error(`${id} has no process`);
    return pid;
  }

  /** SIGKILL (a crash the harness asked for). */
  async kill(id: string): Promise<void> {
    const m = this.member(id);
    m.expectingExit = true;
    await m.proc?.kill();
  }

  signal(id: string, sig: NodeJS.Signals): void {
    this.member(id).proc?.process.kill(sig);
  }

  /** Ops port of a member's current process (from its ready line). */
  opsPort(id: string): number | undefined {
    const p = this.member(id).proc?.ready.opsPort;
    return typeof p === "number" ? p : undefined;
  }

  /** A Prometheus counter summed over its label sets, from a member's /metrics; undefined when unreachable. */
  async metric(id: string, name: string): Promise<number | undefined> {
    const port = this.opsPort(id);
    if (port === undefined) return undefined;
    try {
      const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
      let sum = 0;
      for (const line of text.split("\n")) {
        if (line.startsWith(`${name} `) || line.startsWith(`${name}{`)) sum += Number(line.slice(line.lastIndexOf(" ") + 1));
      }
      return sum;
    } catch {
      return undefined;
    }
  }

  /** An observer connection for the harness's own reads and watches. */
  connect(): Promise<NatsConnection> {
    return connect({ servers: this.natsUrls.split(","), maxReconnectAttempts: -1, reconnectTimeWait: 100, name: "chaos-observer" });
  }

  /** Stops every member, then the broker; keeps the data dir (logs) when asked. */
  async stop(opts: { keepData?: boolean } = {}): Promise<void> {
    await Promise.all(
      [...this.members.values()].map(async (m) => {
        m.expectingExit = true;
        if (!m.proc) return;
        // A stopped (SIGSTOP) process cannot act on SIGTERM.
        m.proc.process.kill("SIGCONT");
        const timer = setTimeout(() => void m.proc?.kill(), 15_000);
        await m.proc.stop();
        clearTimeout(timer);
      }),
    );
    await Promise.all([...this.logs.values()].map((l) => new Promise<void>((r) => l.end(() => r()))));
    await this.nats?.stop({ keepStore: true });
    await this.cluster?.stop({ keepStore: true });
    if (!opts.keepData) rmSync(this.dataDir, { recursive: true, force: true });
    rmSync(this.obsDir, { recursive: true, force: true });
  }
}

function sharedObsDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "paddock-chaos-obs-"));
  chmodSync(dir, 0o1777);
  return dir;
}
