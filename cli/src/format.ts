import type { Agent, AuditEvent, Environment, Runner, Session } from "@paddock/contracts";

/** Left-aligned columns separated by two spaces; the last column is not padded. */
export function table(header: readonly string[], rows: ReadonlyArray<readonly string[]>): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  const line = (cells: readonly string[]) =>
    cells
      .map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i] ?? 0)))
      .join("  ")
      .trimEnd();
  return [header, ...rows].map(line).join("\n") + "\n";
}

/** `key: value` lines; nested values as compact JSON, epoch-ms fields (`...At`) as UTC time. */
export function keyValues(record: Readonly<Record<string, unknown>>): string {
  const entries = Object.entries(record).filter(([, v]) => v !== undefined);
  const width = Math.max(0, ...entries.map(([k]) => k.length + 1));
  return entries.map(([k, v]) => `${`${k}:`.padEnd(width)} ${scalar(k, v)}`).join("\n") + "\n";
}

function scalar(key: string, v: unknown): string {
  if (typeof v === "number" && key.endsWith("At")) return `${time(v)} (${String(v)})`;
  if (typeof v === "string") return v;
  if (v === null) return "-";
  return typeof v === "object" ? JSON.stringify(v) : String(v);
}

/** UTC, second precision: `2025-01-02 03:04:05`. */
export function time(ms: number): string {
  return new Date(ms).toISOString().slice(0, 19).replace("T", " ");
}

export function json(value: unknown): string {
  return JSON.stringify(value, null, 2) + "\n";
}

export function sessionsTable(sessions: readonly Session[]): string {
  return table(
    ["ID", "NAME", "STATE", "RUNNER", "CREATED"],
    sessions.map((s) => [s.id, s.name ?? "-", s.state, s.runnerId ?? "-", time(s.createdAt)]),
  );
}

/** STATE says whether a runner is connected: `lost` is a runner whose lease expired. */
export function runnersTable(runners: readonly Runner[]): string {
  return table(
    ["ID", "POOL", "STATE", "USED/TOTAL", "CAPABILITIES", "LAST-SEEN"],
    runners.map((r) => [
      r.id,
      r.poolId,
      r.state,
      `${String(r.capacityUsed)}/${String(r.capacityTotal)}`,
      r.capabilities.join(",") || "-",
      time(r.lastSeenAt),
    ]),
  );
}

export function eventsTable(events: readonly AuditEvent[]): string {
  return table(
    ["AT", "ACTION", "KIND", "RESOURCE", "ACTOR", "GEN"],
    events.map((e) => [time(e.at), e.action, e.resource.kind, e.resource.id, e.actorId, String(e.placementGeneration)]),
  );
}

const EVENT_COLUMNS = [19, 13, 11, 28, 16] as const;

function eventCells(cells: readonly string[]): string {
  return cells.map((c, i) => (i < EVENT_COLUMNS.length ? c.padEnd(EVENT_COLUMNS[i] ?? 0) : c)).join("  ").trimEnd() + "\n";
}

/** Header of `events --follow`: the events table's columns at fixed widths, since rows arrive one by one. */
export const EVENT_LINE_HEADER = eventCells(["AT", "ACTION", "KIND", "RESOURCE", "ACTOR", "GEN"]);

/** One row of `events --follow`. */
export function eventLine(e: AuditEvent): string {
  return eventCells([time(e.at), e.action, e.resource.kind, e.resource.id, e.actorId, String(e.placementGeneration)]);
}

export function environmentsTable(environments: readonly Environment[]): string {
  return table(
    ["ID", "NAME", "IMAGE", "EGRESS", "SECRETS", "UPDATED"],
    environments.map((e) => [
      e.id,
      e.name,
      e.image ?? "-",
      e.egressAllow.join(",") || "-",
      e.secretRefs.join(",") || "-",
      time(e.updatedAt),
    ]),
  );
}

/** TURN is the latest turn's state and how many turns the agent started; lineage is the agent it resumed and the one that resumed it. */
export function agentsTable(agents: readonly Agent[]): string {
  return table(
    ["ID", "STATE", "PID", "RUNTIME", "MODEL", "TURN", "TOKENS", "PREDECESSOR", "SUCCESSOR"],
    agents.map((a) => [
      a.id,
      a.state,
      String(a.pid),
      a.runtime,
      a.model ?? "-",
      `${a.turn.state}/${String(a.turn.count)}`,
      String(a.usage.tokens),
      a.predecessorId ?? "-",
      a.successorId ?? "-",
    ]),
  );
}
