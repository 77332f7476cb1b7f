import { Counter, Gauge, type Registry } from "prom-client";
import { createBusMetrics, type BusMetrics } from "@paddock/bus";

export interface RunnerMetrics extends BusMetrics {
  /** Terminal writers latched shut because a successor generation wrote. */
  termFenced: Counter;
  /** Input dropped because a newer controller generation was already seen. */
  staleInput: Counter;
  /** Input dropped because the app's input queue was at its bound (a sender that ignored credit). */
  inputOverflow: Counter;
  /** Dispatch commands ignored because they carry another runner generation. */
  staleDispatch: Counter;
  /** Sessions torn down because the held check found their record ended (the scheduler's teardown never came). */
  releasedByHeldCheck: Counter;
  /** Terminal publishes retried after a non-fencing error (timeouts). */
  termRetries: Counter;
  /** Sessions held right now. */
  sessions: Gauge;
  /** Watch-mode reloads carried out. */
  watchReloads: Counter;
  /** Watch-mode reloads deferred to the end of the rate window (the session's budget for the window was spent). */
  watchReloadsDeferred: Counter;
  /** Watch-mode workspace changes that reload nothing: an ignore rule, or the apps' own startup writes. */
  watchChangesIgnored: Counter<"reason">;
  /** Checkpoints (snapshot, cold suspend) that could not be stored. */
  checkpointFailures: Counter;
  /** Re-registrations after start, by what prompted them (lost, generation, missing, reconnect). */
  reregistrations: Counter<"reason">;
  /** Commands answered with a refused fact, by command type. */
  refusedCommands: Counter<"type">;
  /** Screen checkpoints written to SCREENS. */
  screenCheckpoints: Counter;
  /** Screen checkpoints not written: `too_large`, `failed` (publish), `backlog` (the emulator fell behind; the app placement writes no more). */
  screenCheckpointsSkipped: Counter<"reason">;
  /** bwrap: apps started, `warm` (on a sandbox the warm pool started ahead) or `cold` (a launch of their own). */
  sandboxAppStarts: Counter<"start">;
  /** bwrap: sandboxes of the warm pool ready for a create now. */
  sandboxWarmReady: Gauge;
  sandboxNetworkWork: Gauge;
}

export function createRunnerMetrics(registry?: Registry): RunnerMetrics {
  const bus = createBusMetrics(registry);
  const registers = [bus.registry];
  return {
    ...bus,
    termFenced: new Counter({
      name: "paddock_term_fenced_total",
      help: "Terminal log writers latched shut by a successor generation",
      registers,
    }),
    staleInput: new Counter({
      name: "paddock_stale_input_total",
      help: "Terminal input dropped: an older controller generation, or the runner had not confirmed its registration since a stall",
      registers,
    }),
    inputOverflow: new Counter({
      name: "paddock_runner_input_overflow_total",
      help: "Terminal input dropped because the app's input queue was at its bound (the sender ignored credit)",
      registers,
    }),
    staleDispatch: new Counter({
      name: "paddock_stale_dispatch_total",
      help: "Dispatch commands ignored because they carry another runner generation",
      registers,
    }),
    releasedByHeldCheck: new Counter({
      name: "paddock_runner_released_by_held_check_total",
      help: "Sessions torn down because the held check found their record ended without the teardown reaching this runner",
      registers,
    }),
    termRetries: new Counter({
      name: "paddock_term_publish_retries_total",
      help: "Terminal chunk publishes retried after a non-fencing error",
      registers,
    }),
    sessions: new Gauge({ name: "paddock_runner_sessions", help: "Sessions held by this runner", registers }),
    watchReloads: new Counter({ name: "paddock_watch_reloads_total", help: "Watch-mode reloads of a session's apps", registers }),
    watchReloadsDeferred: new Counter({
      name: "paddock_watch_reloads_deferred_total",
      help: "Watch-mode reloads deferred to the end of the per-session rate window",
      registers,
    }),
    watchChangesIgnored: new Counter({
      name: "paddock_watch_changes_ignored_total",
      help: "Watch-mode workspace changes that reload nothing, by reason (ignore_rule, own_write)",
      labelNames: ["reason"],
      registers,
    }),
    checkpointFailures: new Counter({ name: "paddock_checkpoint_failures_total", help: "Checkpoints that could not be stored", registers }),
    reregistrations: new Counter({
      name: "paddock_runner_reregistrations_total",
      help: "Registrations after start: the runner was fenced (lost, generation moved, record missing) or reconnected",
      labelNames: ["reason"],
      registers,
    }),
    refusedCommands: new Counter({
      name: "paddock_refused_commands_total",
      help: "Dispatch commands the runner could not carry out",
      labelNames: ["type"],
      registers,
    }),
    screenCheckpoints: new Counter({ name: "paddock_screen_checkpoints_total", help: "Screen checkpoints written", registers }),
    screenCheckpointsSkipped: new Counter({
      name: "paddock_screen_checkpoints_skipped_total",
      help: "Screen checkpoints not written: too_large, failed, backlog",
      labelNames: ["reason"],
      registers,
    }),
    sandboxAppStarts: new Counter({
      name: "paddock_sandbox_app_starts_total",
      help: "bwrap: apps started on a warm sandbox (start=warm) or through a launch of their own (start=cold)",
      labelNames: ["start"],
      registers,
    }),
    sandboxWarmReady: new Gauge({ name: "paddock_sandbox_warm_ready", help: "bwrap: sandboxes of the warm pool ready for a create", registers }),
    sandboxNetworkWork: new Gauge({ name: "paddock_sandbox_network_work", help: "bwrap: session networks being built or torn down in the background", registers }),
  };
}
