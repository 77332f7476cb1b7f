import { callRpc, encoderOf } from "@paddock/bus";
import { FleetRpc, Subjects, type AppSpec, type DispatchCommand } from "@paddock/contracts";
import { AppSlot, type AppSlotDeps } from "./app-slot.ts";
import { ScreenTracker } from "../terminal/screen-tracker.ts";
import type { SessionRuntimeDeps } from "./session-deps.ts";
import { defaultTerminalSettings } from "../terminal/term-options.ts";
import { realClock, TermWriter } from "../terminal/term-writer.ts";
import type { HeldSession } from "@paddock/contracts";
import type { Sandbox } from "../sandbox/backend.ts";

/** What a placement's app slots are built from: the runner's deps and this placement. */
export interface AppWiring {
  deps: Pick<SessionRuntimeDeps, "nc" | "js" | "jsm" | "runner" | "metrics" | "log" | "now" | "killGraceMs" | "terminal" | "openScreen">;
  held: HeldSession;
  /** Asks the record whether this placement is still current (a refused terminal chunk on another runner's subject). */
  isCurrentPlacement: () => Promise<boolean>;
  onEnded: AppSlotDeps["onEnded"];
  /** Output of this app was committed (the runner's activity report). */
  onOutput?: () => void;
}

/** The wiring of a placement's apps: the record decides whether it is still current, output marks the session active. */
export function placementWiring(deps: SessionRuntimeDeps, held: HeldSession, onEnded: AppSlotDeps["onEnded"]): AppWiring {
  return {
    deps,
    held,
    isCurrentPlacement: async () => (await callRpc(deps.nc, FleetRpc.placementCheck, { ...deps.runner, ...held })).current,
    onEnded,
    onOutput: () => deps.activity?.touch(held.sessionId),
  };
}

/**
 * One app of the placement: its terminal log writer (fenced by the placement
 * generation) and, unless they are off, its screen checkpoints fed by what
 * the writer commits.
 */
export function buildAppSlot(w: AppWiring, sandbox: Sandbox, spec: AppSpec, env: Record<string, string>): AppSlot {
  const { deps, held } = w;
  const terminal = deps.terminal ?? defaultTerminalSettings;
  const screen = terminal.screen
    ? new ScreenTracker({
        js: deps.js,
        encode: encoderOf(deps.nc),
        subject: Subjects.screen(deps.runner.poolId, deps.runner.runnerId, held.sessionId, spec.name),
        placementGeneration: held.placementGeneration,
        ...terminal.screen,
        clock: realClock,
        metrics: deps.metrics,
        log: deps.log,
        ...(deps.openScreen ? { openScreen: deps.openScreen } : {}),
      })
    : undefined;
  const writer = new TermWriter({
    js: deps.js,
    jsm: deps.jsm,
    ...deps.runner,
    isCurrentPlacement: w.isCurrentPlacement,
    sessionId: held.sessionId,
    app: spec.name,
    placementGeneration: held.placementGeneration,
    metrics: deps.metrics,
    log: deps.log,
    coalesceMs: terminal.coalesceMs,
    onCommitted: (seq, body) => {
      w.onOutput?.();
      screen?.observe(seq, body);
    },
    onResized: screen ? (seq, size) => screen.resized(seq, size) : undefined,
  });
  return new AppSlot(spec, { sandbox, env, writer, screen, now: deps.now, killGraceMs: deps.killGraceMs, onEnded: w.onEnded });
}

/**
 * A minimal environment: nothing of the agent's own (tokens, NATS credentials)
 * leaks in. An image's Env (its PATH above all: a Debian, Alpine or Python
 * image's tools are found through it) replaces the defaults PATH and LANG and
 * adds its own variables; HOME, TERM and PADDOCK_SESSION_ID stay Paddock's (the
 * workspace is HOME, the PTY is an xterm). Secrets, the session token and the
 * proxy variables are laid over this by the caller.
 */
export function baseEnv(childPath: string, workspace: string, sessionId: string, imageEnv: Readonly<Record<string, string>> = {}): Record<string, string> {
  return { PATH: childPath, LANG: "C.UTF-8", ...imageEnv, HOME: workspace, TERM: "xterm-256color", PADDOCK_SESSION_ID: sessionId };
}

/** The session's own credentials for calling Paddock back; a secret, never logged. */
export function tokenEnv(cmd: Extract<DispatchCommand, { type: "start" }>, token: string | undefined, gatewayUrl: string | undefined): Record<string, string> {
  if (token === undefined) return {};
  return { PADDOCK_TOKEN: token, ...(gatewayUrl ? { PADDOCK_URL: gatewayUrl } : {}), PADDOCK_SESSION_ID: cmd.sessionId };
}
