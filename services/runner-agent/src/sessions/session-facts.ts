/**
 * A placement's facts: published one after another through one chain, under
 * the runner generation current when each is emitted; stated again after a
 * re-registration (restate, restateRunning); silenced once the placement is
 * discarded. SessionRuntime owns one.
 */
import type { HeldSession, SessionState } from "@paddock/contracts";
import type { AppSlot, GenerationEnd, GenerationStart } from "./app-slot.ts";
import type { FactBody, FactPublisher } from "../fleet/facts.ts";
import type { Phase } from "./session-deps.ts";

export class SessionFacts {
  private chain: Promise<unknown> = Promise.resolve();
  /** Discarded (its record belongs to a successor): nothing more is reported. */
  private silenced = false;
  /** The runner generation the exited fact was produced under, once it was. */
  private exitedUnder: number | undefined;
  /** The runner generation the (latest) running fact was produced under, once it was. */
  private runningUnder: number | undefined;

  constructor(
    private readonly facts: FactPublisher,
    private readonly held: HeldSession,
    /** The running fact: with the setup this sandbox was booted with (none for a restored workspace). */
    readonly runningFact: FactBody,
  ) {}

  silence(): void {
    this.silenced = true;
  }

  /**
   * Publishes a fact after every earlier fact of this session, under the
   * runner generation current now (not when its turn comes).
   */
  emit(body: FactBody, key?: string): Promise<boolean> {
    if (this.silenced) return Promise.resolve(false);
    const generation = this.facts.generation();
    if (body.type === "exited") this.exitedUnder = generation;
    if (body.type === "running") this.runningUnder = generation;
    const next = this.chain.then(() => (this.silenced ? false : this.facts.publish(this.held, body, key, generation)));
    this.chain = next;
    return next;
  }

  /**
   * After a re-registration that kept this placement: a fact produced under
   * the old runner generation is dropped by the scheduler's fence, even one
   * committed but not yet applied. An exited fact is stated again under the
   * new generation (a run-mode session has no other way to end); a start,
   * warm suspend or resume is stated again where the record (`recordState`,
   * as the registration reply shows it) says otherwise than the sandbox.
   * Each is a new fact with its own message id, not the old one upgraded.
   */
  restate(phase: Phase, recordState: SessionState | undefined, reportExited: (key: string) => void): void {
    const generation = this.facts.generation();
    if (phase === "exited") {
      if (this.exitedUnder !== undefined && this.exitedUnder !== generation) reportExited(`r${generation}`);
      return;
    }
    const key = `r${generation}`;
    if (recordState === "creating" && (phase === "running" || phase === "frozen")) void this.emit(this.runningFact, key);
    if ((recordState === "creating" || recordState === "running") && phase === "frozen") void this.emit({ type: "suspended", warm: true }, key);
    if (recordState === "suspended_warm" && phase === "running") void this.emit({ type: "resumed" }, key);
  }

  /**
   * A start redelivered for this placement: the scheduler sends it again only
   * while the record is still creating. A running fact produced under an
   * older runner generation is dropped by the scheduler's fence, even when
   * committed (it may be applied after the re-registration), and the record
   * would stay creating, refuse the exit and fail at its timeout (found by
   * `pnpm chaos`, broker). So state it again under the current generation.
   * Only on this request: restating it for every kept session at each
   * re-registration would repeat hundreds of facts nobody needs.
   */
  restateRunning(phase: Phase): void {
    const generation = this.facts.generation();
    if (this.runningUnder === undefined || this.runningUnder === generation) return;
    if (phase !== "running" && phase !== "exited") return;
    void this.emit(this.runningFact, `r${generation}`);
  }

  reportRun(slot: AppSlot, run: GenerationStart["run"], requestId?: string): Promise<boolean> {
    return this.emit({ type: "app", app: slot.name, run, ...(requestId !== undefined ? { requestId } : {}) }, `${slot.name}-${run.generation}-${run.phase}`);
  }

  reportEnd(slot: AppSlot, end: GenerationEnd): Promise<boolean> {
    return this.emit({ type: "app", app: slot.name, run: end.run, durationMs: end.durationMs }, `${slot.name}-${end.run.generation}-completed`);
  }
}
