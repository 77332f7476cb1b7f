import { spawn, type ChildProcess } from "node:child_process";
import { createInterface } from "node:readline";
import { join, resolve } from "node:path";
import { repoRoot } from "./nats-server.ts";

export interface ServiceProcess {
  name: string;
  process: ChildProcess;
  /** Fields of the service's "ready" log line (ports and the like). */
  ready: Record<string, unknown>;
  /** Every JSON log line seen so far. */
  logs: Array<Record<string, unknown>>;
  /** Raw stdout and stderr text, for assertions that nothing secret was logged. */
  output(): string;
  /** Resolves with the first log line matching pred (already seen or future). */
  waitForLog(pred: (line: Record<string, unknown>) => boolean): Promise<Record<string, unknown>>;
  /** SIGTERM and wait for exit; resolves with the exit code. */
  stop(): Promise<number | null>;
  /** SIGKILL and wait. */
  kill(): Promise<void>;
  exited: Promise<number | null>;
}

/** The entry point of each service, relative to the repo root. */
export const serviceEntry = {
  scheduler: "services/scheduler/src/main.ts",
  "runner-agent": "services/runner-agent/src/main.ts",
  gateway: "services/gateway/src/main.ts",
  "event-recorder": "services/event-recorder/src/main.ts",
} as const;
export type ServiceName = keyof typeof serviceEntry;

export const tsxBin = join(repoRoot, "node_modules", ".bin", "tsx");

/** Where `npm run build` puts each service's bundle (scripts/build.ts), relative to the repo root. */
export const builtEntry = (name: ServiceName): string => `services/${name}/dist/main.js`;

/**
 * Starts a service as its own OS process (tsx, no build step) and resolves
 * once it logs "ready". Rejects with its output if it exits first.
 */
export interface StartServiceOptions {
  /** Entry file, absolute or relative to the repo root; the service's main.ts (its bundle when `built`) by default. */
  entry?: string;
  /** Run the production build with plain `node` (no TypeScript loader): the bundle of `npm run build`. */
  built?: boolean;
  /** Where to append the output instead of keeping it in memory (long-running use). */
  logTo?: NodeJS.WritableStream;
  /** Called with the child as soon as it is spawned, before it is ready (a supervisor can stop it while it starts). */
  onSpawn?: (child: ChildProcess) => void;
  /**
   * A command the service runs under, which execs it (e.g. `setpriv --reuid …`
   * for a runner of its own user): the spawned process is still the service.
   */
  wrap?: readonly string[];
}

export function startService(
  name: ServiceName | string,
  env: Record<string, string>,
  opts: StartServiceOptions = {},
): Promise<ServiceProcess> {
  const file = resolve(repoRoot, opts.entry ?? (opts.built === true ? builtEntry(name as ServiceName) : serviceEntry[name as ServiceName]));
  // One OS process per service (node with the tsx loader, not the tsx CLI,
  // which would put a wrapper process in front): signals reach the service itself.
  const loader = opts.built === true ? [] : ["--import", "tsx"];
  const argv = [...(opts.wrap ?? []), process.execPath, ...loader, file];
  const child = spawn(argv[0]!, argv.slice(1), {
    cwd: repoRoot,
    env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "/tmp", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  opts.onSpawn?.(child);
  const logs: Array<Record<string, unknown>> = [];
  let raw = "";
  const waiters: Array<{ pred: (l: Record<string, unknown>) => boolean; resolve: (l: Record<string, unknown>) => void }> = [];
  const exited = new Promise<number | null>((r) => child.once("exit", (code) => r(code)));
  let ready = false;
  const onLine = (line: string) => {
    if (opts.logTo) opts.logTo.write(line + "\n");
    else raw += line + "\n";
    if (!line.startsWith("{") || (opts.logTo && ready)) return;
    let parsed: Record<string, unknown>;
    try {
      parsed = JSON.parse(line) as Record<string, unknown>;
    } catch {
      return;
    }
    logs.push(parsed);
    for (const w of [...waiters]) {
      if (w.pred(parsed)) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve(parsed);
      }
    }
  };
  createInterface({ input: child.stdout! }).on("line", onLine);
  createInterface({ input: child.stderr! }).on("line", onLine);
  const waitForLog = (pred: (l: Record<string, unknown>) => boolean) => {
    const seen = logs.find(pred);
    if (seen) return Promise.resolve(seen);
    return new Promise<Record<string, unknown>>((resolve) => waiters.push({ pred, resolve }));
  };
  const handle = (ready: Record<string, unknown>): ServiceProcess => ({
    name,
    process: child,
    ready,
    logs,
    output: () => raw,
    waitForLog,
    exited,
    stop: async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
      return exited;
    },
    kill: async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
      await exited;
    },
  });
  return Promise.race([
    waitForLog((l) => l.msg === "ready").then((l) => {
      ready = true;
      return handle(l);
    }),
    exited.then((code) => {
      throw new Error(`${name} exited (${code}) before ready:\n${raw.slice(-4000)}`);
    }),
  ]);
}
