/** Pure rules of the list pages: which rows a filter keeps, which actions a row offers. */
import { isTerminal, type AuditEvent, type Runner, type Session, type SessionState } from "@paddock/contracts";

export interface SessionFilter {
  /** "" for every state. */
  readonly state: SessionState | "";
  /** Case-insensitive substring of the name or the id. */
  readonly text: string;
}

export function filterSessions(sessions: readonly Session[], f: SessionFilter): Session[] {
  const text = f.text.trim().toLowerCase();
  return sessions.filter((s) => (f.state === "" || s.state === f.state) && (text === "" || s.id.toLowerCase().includes(text) || (s.name ?? "").toLowerCase().includes(text)));
}

export type SessionAction = "suspend-warm" | "suspend-cold" | "resume" | "snapshot" | "recycle" | "delete";

/** The lifecycle buttons a session in `state` shows (the API still has the last word: a refusal is shown). */
export function sessionActions(state: SessionState): SessionAction[] {
  if (isTerminal(state)) return [];
  const out: SessionAction[] = [];
  if (state === "running") out.push("suspend-warm");
  if (state === "running" || state === "suspended_warm") out.push("suspend-cold");
  if (state === "suspended_warm" || state === "suspended_cold") out.push("resume");
  if (state === "running") out.push("snapshot");
  if (state === "running" || state === "suspended_warm" || state === "suspended_cold") out.push("recycle");
  out.push("delete");
  return out;
}

export type RunnerAction = "drain" | "cordon" | "uncordon";

/** The state buttons a runner in `state` shows; a lost runner has none (only the scheduler decides that). */
export function runnerActions(state: Runner["state"]): RunnerAction[] {
  switch (state) {
    case "active":
      return ["drain", "cordon"];
    case "draining":
      return ["cordon", "uncordon"];
    case "cordoned":
      return ["drain", "uncordon"];
    case "lost":
      return [];
  }
}

export interface EventFilter {
  /** "" for every action. */
  readonly action: string;
  /** Case-insensitive substring of the actor's id. */
  readonly actor: string;
}

export function filterEvents(events: readonly AuditEvent[], f: EventFilter): AuditEvent[] {
  const actor = f.actor.trim().toLowerCase();
  return events.filter((e) => (f.action === "" || e.action === f.action) && (actor === "" || e.actorId.toLowerCase().includes(actor)));
}

/**
 * Keeps the newest `max` events (by time, then arrival), without duplicates
 * (a reconnected follow replays what it already sent).
 */
export function mergeEvents(known: Map<string, AuditEvent>, incoming: readonly AuditEvent[], max: number): Map<string, AuditEvent> {
  for (const e of incoming) known.set(e.id, e);
  if (known.size <= max) return known;
  const keep = [...known.values()].sort((a, b) => b.at - a.at).slice(0, max);
  return new Map(keep.map((e) => [e.id, e]));
}
