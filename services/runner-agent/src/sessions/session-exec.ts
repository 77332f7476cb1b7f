import { relativeSegments, resolveInside } from "@paddock/archive";
import { EXEC_READER_TIMEOUT_MS, type HeldSession } from "@paddock/contracts";
import { SessionExecs } from "../exec/session-execs.ts";
import type { Sandbox } from "../sandbox/backend.ts";
import type { SessionRuntimeDeps } from "./session-deps.ts";

/** A placement's exec'd processes, in its sandbox with its apps' environment. */
export function createSessionExecs(deps: SessionRuntimeDeps, held: HeldSession, sandbox: Sandbox, env: Record<string, string>): SessionExecs {
  return new SessionExecs({
    js: deps.js,
    ...deps.runner,
    sessionId: held.sessionId,
    placementGeneration: held.placementGeneration,
    sandbox,
    env,
    now: deps.now,
    readerTimeoutMs: deps.exec?.readerTimeoutMs ?? EXEC_READER_TIMEOUT_MS,
    setTimer: (fn, ms) => {
      const t = setTimeout(fn, ms);
      return { cancel: () => clearTimeout(t) };
    },
    log: deps.log,
    onActivity: () => deps.activity?.touch(held.sessionId),
    isWorkspaceDir: async (cwd) => {
      try {
        const target = await resolveInside(sandbox.workspace, relativeSegments(cwd), { create: false });
        target.close();
        return target.kind === "directory";
      } catch {
        return false;
      }
    },
  });
}
