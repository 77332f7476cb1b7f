/**
 * Sandboxes started before their create (decision 0045). A create on bwrap
 * cannot meet its goal with a spawn on its path: the launch chain alone
 * (prlimit → nsenter → setpriv → bwrap with every namespace) takes several
 * process starts. So the backend keeps `size` sandboxes running ahead, each
 * holding everything a session's sandbox holds (a uid, its directories, a
 * network from network-pool.ts, its cgroup where delegated) and a PTY whose
 * process is the whole chain ending in a shell that waits on a FIFO:
 *
 *   … bwrap … -- sh -c 'exec 3<>/run/paddock/start && printf W && . /run/paddock/start'
 *
 * `/run/paddock` is a directory of the runner's (in the entry's directory,
 * bound read-only), the FIFO open to the entry's gid only. The shell holds
 * the FIFO open (fd 3) before it prints W on the PTY, so from then on the
 * FIFO has a reader exactly while the waiter lives, and a script written to it
 * waits in the pipe until the shell reads it (no window between the W and
 * the wait). The runner reads the W and nothing else before the claim: an
 * entry that prints anything more, or dies, is discarded and never handed out.
 *
 * A create takes a ready entry (`take`): its FIFO must open for writing
 * (ENXIO: its shell is gone; discarded, the next one tried), and its
 * directory is renamed to the session's (the sandbox's binds follow the
 * inode). The session's first PTY app then claims the waiter (`Waiter.claim`):
 * the PTY is resized to the app's size, the runner's handlers replace the
 * pool's, and warm-script.ts's script goes into the FIFO; the shell execs the
 * app. An app that cannot be handed over (piped, or an environment a shell
 * cannot export) starts cold in the same sandbox and the waiter ends (told
 * `exit` through its FIFO). The pool refills shortly after a taken entry
 * settled (claimed or ended), off the create's path.
 */
import { closeSync } from "node:fs";
import { chown, mkdir, rename } from "node:fs/promises";
import { execFile } from "node:child_process";
import { join } from "node:path";
import { promisify } from "node:util";
import { spawn as spawnPty, type IDisposable, type IPty } from "@lydell/node-pty";
import { INITIAL_TERMINAL_SIZE, type TerminalSize } from "@paddock/contracts";
import type { Logger } from "@paddock/logging";
import type { SandboxLaunch } from "./launch.ts";
import type { SessionNetwork } from "./network.ts";
import type { SessionIds } from "./uid-allocator.ts";
import { openWaiterFifo, PTY_SPAWN, unsafeForWarm, WAITER_ENV, WAITER_FD, warmScript, writeScript, type WarmApp } from "./warm-script.ts";

const execFileAsync = promisify(execFile);

/** Where a warm sandbox sees the runner's control directory (read-only); `start` in it is the FIFO its shell waits on. */
export const CONTROL_PATH = "/run/paddock";
const CONTROL_DIR = "control";
const FIFO = "start";
/** What a waiter prints on its PTY right before it waits: the only byte the runner takes from it before the claim. */
const READY_MARK = "W";
/** Prefix of an entry's directory in the sessions dir: never a session id (ids do not start with a dot). */
export const WARM_PREFIX = ".warm-";
/** A waiter not waiting by then is discarded (a host too loaded to start one is better served cold). */
const READY_TIMEOUT_MS = 30_000;
/**
 * How long after a claim the pool starts its refill. Its first steps are
 * synchronous (a /proc scan for a free uid, the PTY's fork of the runner):
 * begun at once they landed between the claim and the session's running
 * fact, several ms on the create's path (measured: DISPATCH → running fact 25
 * ms against 17 on the process backend). A create right behind another
 * finds the pool one entry short until then.
 */
const REFILL_DELAY_MS = 50;
/** Entries that failed to become ready in a row before the pool stops refilling by itself (a take tries again). */
const MAX_START_FAILURES = 3;

/** What a sandbox holds from its create to its destroy, whether it was made for a session or ahead of one. */
export interface SandboxHold {
  /** Keys the uid's claim and the cgroup: the session id on a cold create, the entry's name for a warm one. */
  key: string;
  ids: SessionIds;
  dir: string;
  net: SessionNetwork | undefined;
  cgroupDirs: string[] | undefined;
}

export type WarmPoolEvent =
  | { type: "ready"; uid: number }
  | { type: "discarded"; uid: number; reason: string }
  | { type: "claimed"; uid: number }
  /** A taken entry whose app started cold (its waiter ended). */
  | { type: "declined"; uid: number; reason: string }
  /** How many entries are ready now, after any change. */
  | { type: "ready_count"; ready: number };

export interface WarmPoolOptions {
  size: number;
  sessionsDir: string;
  log: Logger;
  /** Host paths of `mkfifo` and of the shell the waiter runs (the host's root is the sandbox's). */
  mkfifo: string;
  sh: string;
  /** The runner's own uid: owner of the control directory and FIFO. */
  runnerUid: number;
  /** Holds a sandbox's parts under key in dir (backend.ts, as a cold create does). */
  hold(key: string, dir: string): Promise<SandboxHold>;
  /** Kills what runs as the hold's uid and gives back everything; resolves once its directory is gone. */
  release(hold: SandboxHold): Promise<void>;
  /** The launch of command with env in the hold's sandbox (as a cold start's), readOnly bound in it too. */
  launch(hold: SandboxHold, command: readonly string[], env: Record<string, string>, readOnly: { host: string; path: string }): SandboxLaunch;
  onEvent?: ((event: WarmPoolEvent) => void) | undefined;
}

/** A taken entry's waiting shell: claimed by the session's first PTY app, or ended. */
export interface Waiter {
  /** The PTY the app now runs on; undefined when the waiter could not take it (it is ended then, the app starts cold). */
  claim(app: WarmApp, size: TerminalSize | undefined): IPty | undefined;
  /** Ends the waiter unclaimed (it is told `exit` through its FIFO). Idempotent. */
  dispose(reason: string): void;
}

export interface WarmPool {
  /** Starts entries up to size; resolves once each started one is ready or discarded. */
  fill(): Promise<void>;
  /** A ready, live entry moved to dir; undefined when none is. */
  take(dir: string): Promise<{ hold: SandboxHold; waiter: Waiter } | undefined>;
  /** Discards one ready entry (its uid is wanted by a cold create); false when none was ready. */
  shrink(): Promise<boolean>;
  /** Discards every entry and waits until they are gone (processes, network, cgroup, directory, uid). */
  stop(): Promise<void>;
  readonly readyCount: number;
}

interface Entry {
  hold: SandboxHold;
  pty: IPty;
  /** What the waiter printed up to its mark. */
  seen: string;
  /** It printed more than its mark, or ended: never handed an app. */
  unfit: string | undefined;
  /** Handed to a session: the pool no longer discards it (the sandbox's destroy releases it). */
  taken: boolean;
  listeners: IDisposable[];
}

export function createWarmPool(opts: WarmPoolOptions): WarmPool {
  const ready: Entry[] = [];
  const starting = new Set<Promise<void>>();
  /** Entries started and not ready yet, each with what gives it up (at stop: a waiter that never says it waits would hold the stop up). */
  const notReady = new Map<Entry, (reason: string) => void>();
  const releasing = new Set<Promise<void>>();
  let counter = 0;
  let failures = 0;
  let stopped = false;
  let lastCount = 0;
  const countChanged = () => {
    if (ready.length === lastCount) return;
    lastCount = ready.length;
    opts.onEvent?.({ type: "ready_count", ready: lastCount });
  };
  const emit = (event: WarmPoolEvent) => {
    opts.onEvent?.(event);
    countChanged();
  };

  const release = (hold: SandboxHold): Promise<void> => {
    const p = opts.release(hold).catch((err: unknown) => opts.log.warn({ err }, "warm sandbox not released"));
    releasing.add(p);
    void p.finally(() => releasing.delete(p));
    return p;
  };
  const discard = (e: Entry, reason: string): Promise<void> => {
    const i = ready.indexOf(e);
    if (i >= 0) ready.splice(i, 1);
    for (const l of e.listeners.splice(0)) l.dispose();
    emit({ type: "discarded", uid: e.hold.ids.uid, reason });
    return release(e.hold);
  };

  const start = async (): Promise<void> => {
    const key = `${WARM_PREFIX}${++counter}`;
    let hold: SandboxHold;
    try {
      hold = await opts.hold(key, join(opts.sessionsDir, key));
    } catch (err) {
      failures++;
      opts.log.warn({ err }, "warm sandbox not started");
      return;
    }
    let entry: Entry;
    try {
      if (stopped) throw new Error("runner stopping");
      const control = await makeControl(hold, opts);
      const launch = opts.launch(hold, [opts.sh, "-c", `exec ${WAITER_FD}<>${CONTROL_PATH}/${FIFO} && printf ${READY_MARK} && . ${CONTROL_PATH}/${FIFO}`], WAITER_ENV, { host: control, path: CONTROL_PATH });
      const size = INITIAL_TERMINAL_SIZE;
      const pty = spawnPty(launch.file, launch.args, { ...PTY_SPAWN, cols: size.cols, rows: size.rows, env: launch.env, encoding: null });
      entry = { hold, pty, seen: "", unfit: undefined, taken: false, listeners: [] };
    } catch (err) {
      if (!stopped) {
        failures++;
        opts.log.warn({ err }, "warm sandbox not started");
      }
      await release(hold);
      return;
    }
    await untilWaiting(entry);
  };

  /** Resolves once the entry is ready (in `ready`) or discarded. Once taken, what the waiter does is only noted (`unfit`). */
  const untilWaiting = (e: Entry) =>
    new Promise<void>((resolve) => {
      let waiting = false;
      const fail = (reason: string) => {
        e.unfit ??= reason;
        clearTimeout(timer);
        notReady.delete(e);
        resolve();
        if (e.taken) return;
        if (!waiting) failures++;
        // A ready entry that went bad leaves a gap the pool fills again; one that never got ready does not (it could spin).
        void discard(e, reason).then(() => waiting && refill());
      };
      const timer = setTimeout(() => fail("not waiting in time"), READY_TIMEOUT_MS);
      notReady.set(e, fail);
      e.listeners.push(
        e.pty.onData((chunk: string | Buffer) => {
          if (waiting || e.seen.length >= READY_MARK.length) return fail("printed before its claim");
          e.seen += chunk.toString();
          if (e.seen !== READY_MARK.slice(0, e.seen.length) || stopped) return fail("printed before its claim");
          if (e.seen !== READY_MARK) return;
          waiting = true;
          failures = 0;
          clearTimeout(timer);
          notReady.delete(e);
          ready.push(e);
          emit({ type: "ready", uid: e.hold.ids.uid });
          resolve();
        }),
        e.pty.onExit(() => fail("ended")),
      );
    });

  const refill = () => {
    while (!stopped && failures < MAX_START_FAILURES && ready.length + starting.size < opts.size) {
      const p = start();
      starting.add(p);
      void p.finally(() => starting.delete(p));
    }
  };

  return {
    async fill() {
      refill();
      await Promise.all([...starting]);
    },
    async take(dir) {
      for (let e = ready.shift(); e; e = ready.shift()) {
        const fd = e.unfit === undefined ? openWaiterFifo(join(e.hold.dir, CONTROL_DIR, FIFO)) : undefined;
        if (fd === undefined) {
          void discard(e, e.unfit ?? "no reader on its FIFO");
          continue;
        }
        e.taken = true;
        try {
          await rename(e.hold.dir, dir);
        } catch (err) {
          // The session's directory is there already (a leftover): this create goes cold, the entry waits on (its shell holds its own FIFO open).
          opts.log.warn({ err }, "warm sandbox not moved to its session");
          closeSync(fd);
          e.taken = false;
          if (e.unfit === undefined && !stopped) ready.unshift(e);
          else void discard(e, e.unfit ?? "runner stopping");
          return undefined;
        }
        e.hold = { ...e.hold, dir };
        countChanged();
        return { hold: e.hold, waiter: waiterOf(e, fd, emit, () => setTimeout(refill, REFILL_DELAY_MS).unref()) };
      }
      // A take that found none gives the pool a new chance (after failures it stopped refilling by itself), after the cold create it makes way for.
      failures = 0;
      setTimeout(refill, REFILL_DELAY_MS).unref();
      return undefined;
    },
    async shrink() {
      const e = ready.shift();
      if (!e) return false;
      await discard(e, "its uid is wanted");
      return true;
    },
    async stop() {
      stopped = true;
      for (const e of [...ready]) void discard(e, "runner stopping");
      for (const fail of [...notReady.values()]) fail("runner stopping");
      while (starting.size > 0 || releasing.size > 0) await Promise.allSettled([...starting, ...releasing]);
    },
    get readyCount() {
      return ready.length;
    },
  };
}

/** The waiter of a taken entry, fd its FIFO's write end. */
function waiterOf(e: Entry, fd: number, emit: (event: WarmPoolEvent) => void, settled: () => void): Waiter {
  let open = true;
  const settle = () => {
    open = false;
    for (const l of e.listeners.splice(0)) l.dispose();
    settled();
  };
  const dispose = (reason: string) => {
    if (!open) return;
    settle();
    // The shell holds a write end itself, so it would never see EOF: it is told to end. (Gone already: nothing to tell.)
    writeScript(fd, "exit 0\n", () => undefined);
    emit({ type: "declined", uid: e.hold.ids.uid, reason });
  };
  return {
    claim(app, size) {
      if (!open) return undefined;
      // Anything printed before the claim (or an exit seen) makes the entry unfit: never part of the app's terminal.
      const unfit = unsafeForWarm(app) ?? e.unfit;
      if (unfit) {
        dispose(unfit);
        return undefined;
      }
      const { cols, rows } = size ?? INITIAL_TERMINAL_SIZE;
      try {
        e.pty.resize(cols, rows);
      } catch {
        // Its PTY is closed: it ended, the exit not seen yet.
        dispose("ended");
        return undefined;
      }
      settle();
      // A reader gone before the write is a cold start; one gone after it, an app that ended at once.
      const written = writeScript(fd, warmScript(app), () => undefined);
      emit(written ? { type: "claimed", uid: e.hold.ids.uid } : { type: "declined", uid: e.hold.ids.uid, reason: "no reader on its FIFO" });
      return written ? e.pty : undefined;
    },
    dispose,
  };
}

/** The entry's control directory (the runner's; the entry's gid may pass) and FIFO (the runner and the entry's gid read and write). */
async function makeControl(hold: SandboxHold, opts: Pick<WarmPoolOptions, "mkfifo" | "runnerUid">): Promise<string> {
  const dir = join(hold.dir, CONTROL_DIR);
  await mkdir(dir, { mode: 0o750 });
  await chown(dir, opts.runnerUid, hold.ids.gid);
  const fifo = join(dir, FIFO);
  await execFileAsync(opts.mkfifo, ["-m", "0660", fifo], { env: {}, timeout: 10_000 });
  await chown(fifo, opts.runnerUid, hold.ids.gid);
  return dir;
}
