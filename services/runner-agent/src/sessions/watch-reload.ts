import { IGNORE_FILE, IgnoreRules, watchWorkspace, type WorkspaceWatcher } from "./watcher.ts";
import { SlidingWindowLimiter } from "./rate-limit.ts";
import type { RunnerMetrics } from "../metrics.ts";
import type { WatchSettings } from "./session-deps.ts";

/** How long after an app generation starts its own workspace writes are told from a user's. */
export const DEFAULT_SETTLE_MS = 2_000;
/** Paths remembered as the apps' own startup writes, per session (a bound, not a goal). */
const MAX_SELF_WRITTEN = 10_000;

export interface WatchReloaderOptions {
  workspace: string;
  settings: WatchSettings;
  now: () => number;
  /** Restarts the apps with trigger watch; resolves once the new generation started. */
  reload: () => Promise<void>;
  metrics: Pick<RunnerMetrics, "watchReloads" | "watchReloadsDeferred" | "watchChangesIgnored">;
}

/**
 * The reload policy of one watch session. A change reloads every app after
 * `debounceMs` of quiet, at most `maxReloads` per `windowMs`: a reload over
 * the limit is deferred to the moment the window has room (the trailing
 * edge, carrying every change made meanwhile), never dropped.
 *
 * What does not reload: paths of the ignore rules (watcher.ts), and the apps'
 * own startup writes. From the start of a boot or a reload until `settleMs`
 * after the new generation started, the apps are starting: a path changed
 * then is remembered as theirs. After a boot that change does not reload;
 * after a reload it does, unless the path was remembered already — so an app
 * that writes the same files each time it starts never reloads itself, and
 * one that writes new ones reloads itself once per new path. A path changed
 * outside a settle window is forgotten again (a user's file).
 */
export class WatchReloader {
  private readonly limiter: SlidingWindowLimiter;
  private readonly watcher: WorkspaceWatcher;
  private rules: IgnoreRules;
  private readonly selfWritten = new Set<string>();
  /** Boot or a reload in progress: the apps are starting. */
  private starting = true;
  /** What the latest start was: its settle window treats new paths by it. */
  private lastStart: "boot" | "reload" = "boot";
  private settleUntil = 0;
  private debounce: NodeJS.Timeout | undefined;
  private deferred: NodeJS.Timeout | undefined;
  /** A change arrived while a reload ran: one more reload after it. */
  private again = false;
  private closed = false;

  /** Watches from now; the apps are taken to be starting until started() is called. */
  constructor(private readonly opts: WatchReloaderOptions) {
    this.limiter = new SlidingWindowLimiter(opts.settings.maxReloads, opts.settings.windowMs, opts.now);
    this.rules = IgnoreRules.read(opts.workspace);
    this.watcher = watchWorkspace(opts.workspace, (path) => this.observe(path));
  }

  /** The boot's apps started: their settle window begins. */
  started(): void {
    this.starting = false;
    this.settleUntil = this.opts.now() + this.opts.settings.settleMs;
    if (this.again) {
      this.again = false;
      this.fire();
    }
  }

  /** Counts as a change now (a workspace push): one reload per burst, together with what the watcher saw. */
  poke(): void {
    if (!this.closed) this.changed();
  }

  /** Whether a reload is under way, due or deferred (tests wait for quiet). */
  get busy(): boolean {
    return (this.starting && this.lastStart === "reload") || this.debounce !== undefined || this.deferred !== undefined;
  }

  /** Neither busy nor in a settle window (tests wait for it before a change that must count as a user's). */
  get quiet(): boolean {
    return !this.busy && !this.settling();
  }

  private settling(): boolean {
    return this.starting || this.opts.now() < this.settleUntil;
  }

  close(): void {
    this.closed = true;
    clearTimeout(this.debounce);
    clearTimeout(this.deferred);
    this.debounce = this.deferred = undefined;
    this.watcher.close();
  }

  private observe(path: string | undefined): void {
    if (this.closed) return;
    if (path !== undefined) {
      if (this.rules.matches(path)) {
        if (path === IGNORE_FILE) this.rules = IgnoreRules.read(this.opts.workspace);
        this.opts.metrics.watchChangesIgnored.inc({ reason: "ignore_rule" });
        return;
      }
      if (!this.attribute(path)) {
        this.opts.metrics.watchChangesIgnored.inc({ reason: "own_write" });
        return;
      }
    }
    this.changed();
  }

  /** Whether a change of path counts as a user's (see the class comment). */
  private attribute(path: string): boolean {
    if (!this.settling()) {
      this.selfWritten.delete(path);
      return true;
    }
    if (this.selfWritten.has(path)) return false;
    if (this.selfWritten.size < MAX_SELF_WRITTEN) this.selfWritten.add(path);
    return this.lastStart === "reload";
  }

  private changed(): void {
    clearTimeout(this.debounce);
    this.debounce = setTimeout(() => {
      this.debounce = undefined;
      this.fire();
    }, this.opts.settings.debounceMs);
  }

  private fire(): void {
    if (this.closed || this.deferred !== undefined) return;
    if (this.starting) {
      this.again = true;
      return;
    }
    const waitMs = this.limiter.acquireOrWait();
    if (waitMs > 0) {
      this.opts.metrics.watchReloadsDeferred.inc();
      this.deferred = setTimeout(() => {
        this.deferred = undefined;
        this.fire();
      }, waitMs);
      return;
    }
    this.starting = true;
    this.lastStart = "reload";
    this.opts.metrics.watchReloads.inc();
    const done = () => this.started();
    void this.opts.reload().then(done, done);
  }
}
