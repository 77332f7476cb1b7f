/**
 * The process backend: a session's apps and scripts are plain processes of
 * the runner's own user, each app leading a process group of its own, with
 * the workspace as cwd and HOME. No isolation at all (development only; the
 * runner warns at start, agent.ts).
 */
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import type { Logger } from "@paddock/logging";
import { SpawnError } from "../../errors.ts";
import { SandboxKind, type Sandbox, type SandboxBackend, type SandboxBackendDeps } from "../backend.ts";
import { killLeftoverProcesses } from "../leftovers.ts";
import type { AppProcess } from "../process-group.ts";
import { removeDirSoon } from "../remove-dir.ts";
import { prepareSessionsDir } from "../sessions-dir.ts";
import { spawnApp } from "./app-process.ts";
import { connectHostLoopback, OpenPorts } from "../port-connection.ts";
import { runCommand, runScript } from "./script.ts";

export function createProcessBackend(deps: SandboxBackendDeps): SandboxBackend {
  const { log } = deps;
  return {
    kind: SandboxKind.process,
    limits: [],
    prepare: (sessionsDir) => prepareSessionsDir(sessionsDir, log),
    // Plain processes see the host's root: an image cannot be honoured, and running without it would be a lie.
    create: ({ dir, image }) =>
      image === undefined ? Promise.resolve(processSandbox(dir, log)) : Promise.reject(new SpawnError(`image ${image.slice(0, 256)}: this runner's sandbox (process) cannot run images`)),
    removeDir: async (dir) => {
      await removeDirSoon(dir, log);
    },
    reapStrays: (sessionsDir, held) => killLeftoverProcesses(sessionsDir, log, "of sessions this runner no longer holds", held),
    stop: () => Promise.resolve(),
  };
}

function processSandbox(dir: string, log: Logger): Sandbox {
  const workspace = join(dir, "workspace");
  // Synchronous: a thread-pool round trip here is on every create's path to running, and this is two mkdirs.
  mkdirSync(workspace, { recursive: true });
  const eachApp = (apps: readonly AppProcess[], fn: (app: AppProcess) => void) => apps.forEach(fn);
  let destroyed = false;
  const ports = new OpenPorts();
  return {
    workspace,
    insideWorkspace: workspace,
    adopt: () => Promise.resolve(),
    // The gateway is reached directly (NO_PROXY), as on bwrap: through the egress proxy it would be refused as a host not allowed.
    reach: (gatewayUrl) => Promise.resolve({ egressHost: "127.0.0.1", egressPort: 0, gatewayUrl, noProxy: gatewayUrl ? [new URL(gatewayUrl).hostname] : [], allow: () => Promise.resolve() }),
    startApp: (opts) => spawnApp({ ...opts, cwd: opts.cwd ? join(workspace, opts.cwd) : workspace }),
    connectPort: async (port) => ports.track(await connectHostLoopback(port)),
    startExec: (opts) => spawnApp({ ...opts, app: { ...opts.app, tty: false }, cwd: opts.cwd ? join(workspace, opts.cwd) : workspace }),
    runScript: (opts) => runScript({ ...opts, cwd: workspace }),
    runCommand: (opts) => runCommand({ ...opts, cwd: workspace }),
    freeze: (apps) => {
      ports.closeAll();
      eachApp(apps, (app) => app.freeze());
    },
    thaw: (apps) => eachApp(apps, (app) => app.thaw()),
    // A process that left its app's group (setsid, a daemon) still works in the sandbox: it goes too.
    killLeftovers: async () => {
      await killLeftoverProcesses(dir, log, "that outlived their app's process group");
    },
    usageScope: (apps) => ({ groups: apps.map((app) => app.pid) }),
    destroy: async () => {
      if (destroyed) return;
      destroyed = true;
      ports.closeAll();
      await removeDirSoon(dir, log);
    },
  };
}
