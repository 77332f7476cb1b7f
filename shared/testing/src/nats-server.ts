import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, watch, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

/** Repository root, for locating .tools/ and service entry points. */
export const repoRoot = resolve(fileURLToPath(import.meta.url), "../../../..");

export function natsServerBinary(env: Record<string, string | undefined> = process.env): string {
  const fromEnv = env.PADDOCK_NATS_SERVER;
  if (fromEnv && existsSync(fromEnv)) return fromEnv;
  const local = join(repoRoot, ".tools", "nats-server");
  if (existsSync(local)) return local;
  throw new Error("no nats-server: run through `npm test` (it installs one) or set PADDOCK_NATS_SERVER");
}

export interface NatsServerHandle {
  url: string;
  port: number;
  storeDir: string;
  process: ChildProcess;
  /** SIGKILL, for crash tests; the store dir is kept so it can restart. */
  kill(): Promise<void>;
  /** SIGTERM and wait; removes the store dir unless keepStore. */
  stop(opts?: { keepStore?: boolean }): Promise<void>;
}

export interface NatsServerOptions {
  /** Extra config text appended to the generated config (accounts, users, ...). */
  extraConfig?: string;
  /** Reuse a store dir (restart after kill). */
  storeDir?: string;
  /** Fixed port; a random free one by default. */
  port?: number;
  /** The IPv4 address it listens on (and `url` names); 127.0.0.1 by default. */
  host?: string;
  /** Called with the child as soon as it is spawned, before it listens (a supervisor can stop it while it starts). */
  onSpawn?: (child: ChildProcess) => void;
}

/** The servers' max_payload (deploy/nats/*.conf say the same): 4 MiB. */
export const NATS_MAX_PAYLOAD = 4 * 1024 * 1024;

/**
 * Starts a real nats-server with JetStream on a random port and its own store
 * dir. The port is learned from the server's ports file, written once it
 * listens, so there is no probing and no sleep.
 */
export async function startNatsServer(opts: NatsServerOptions = {}): Promise<NatsServerHandle> {
  const storeDir = opts.storeDir ?? mkdtempSync(join(tmpdir(), "paddock-nats-"));
  const portsDir = mkdtempSync(join(tmpdir(), "paddock-ports-"));
  const conf = join(portsDir, "server.conf");
  writeFileSync(
    conf,
    [
      `listen: "${opts.host ?? "127.0.0.1"}:${opts.port ?? -1}"`,
      `jetstream { store_dir: ${JSON.stringify(storeDir)} }`,
      // One file of up to 2 MiB crosses the bus in one message (MAX_INLINE_FILE_BYTES, base64): the default 1 MB is too small for it.
      `max_payload: ${NATS_MAX_PAYLOAD}`,
      `ports_file_dir: ${JSON.stringify(portsDir)}`,
      opts.extraConfig ?? "",
    ].join("\n"),
    // It may hold passwords (extraConfig): only this user reads it (the dir is 0700 too).
    { mode: 0o600 },
  );
  const child = spawn(natsServerBinary(), ["-c", conf], { stdio: ["ignore", "ignore", "pipe"] });
  opts.onSpawn?.(child);
  let stderr = "";
  child.stderr?.on("data", (d: Buffer) => {
    stderr = (stderr + d.toString()).slice(-8192);
  });
  const port = await waitForPortsFile(portsDir, child, () => stderr);
  const exited = new Promise<void>((r) => child.once("exit", () => r()));
  return {
    url: `nats://${opts.host ?? "127.0.0.1"}:${port}`,
    port,
    storeDir,
    process: child,
    kill: async () => {
      child.kill("SIGKILL");
      await exited;
    },
    stop: async (stopOpts = {}) => {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
      await exited;
      rmSync(portsDir, { recursive: true, force: true });
      if (!stopOpts.keepStore) rmSync(storeDir, { recursive: true, force: true });
    },
  };
}

function readPort(portsDir: string, pid: number): number | undefined {
  const file = readdirSync(portsDir).find((f) => f.endsWith(`_${pid}.ports`));
  if (!file) return undefined;
  try {
    const ports = JSON.parse(readFileSync(join(portsDir, file), "utf8")) as { nats?: string[] };
    const m = /:(\d+)$/.exec(ports.nats?.[0] ?? "");
    return m ? Number(m[1]) : undefined;
  } catch {
    return undefined; // written but not complete yet; the watcher fires again
  }
}

function waitForPortsFile(portsDir: string, child: ChildProcess, stderr: () => string): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const watcher = watch(portsDir);
    const finish = (err?: Error, port?: number) => {
      watcher.close();
      child.off("exit", onExit);
      if (err) reject(err);
      else resolvePort(port as number);
    };
    const check = () => {
      const port = child.pid === undefined ? undefined : readPort(portsDir, child.pid);
      if (port) finish(undefined, port);
    };
    const onExit = (code: number | null) => finish(new Error(`nats-server exited (${code}) before listening: ${stderr()}`));
    watcher.on("change", check);
    child.once("exit", onExit);
    check();
  });
}
