/**
 * Incarnation markers. Every copy of a takeover session's app — the first
 * start and each resume from a checkpoint — prints lines tagged with its own
 * incarnation `<n>-<r>` (n counts starts through a file in the workspace,
 * so it survives a checkpoint; r, random per copy, tells two copies apart: a
 * pid would not, each bwrap sandbox numbering its own from 1), and appends
 * every line it reads on stdin, tagged the same way, to an observation file
 * in the stack's shared dir (every session sees it; each copy runs as its
 * runner's uid for it, so the file is made writable by all). A stale copy is
 * then visible by content alone.
 */
import { existsSync, readFileSync } from "node:fs";

/** The takeover app: a ticker on the terminal and a stdin reader that records what it is given. */
export function incarnationScript(obsDir: string): string {
  const obs = `${obsDir}/$PADDOCK_SESSION_ID`;
  return [
    `umask 0; n=$(cat .inc 2>/dev/null || echo 0); n=$((n+1)); echo $n > .inc; t="$n-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')"`,
    `echo "@$t start" >> "${obs}"`,
    `echo "@$t@start"`,
    `( i=0; while :; do echo "@$t@$i"; i=$((i+1)); sleep 0.1; done ) &`,
    `while IFS= read -r line; do echo "@$t $line" >> "${obs}"; done`,
  ].join("\n");
}

const MARKER = /@(\d+)-(\d+)@/g;

export interface FrameLike {
  bytes: number;
  text: string;
}

export interface StaleReport {
  /** Frames holding a marker of an incarnation older than one already seen. */
  staleFrames: number;
  staleBytes: number;
  /** Incarnation tags in the order they first appeared. */
  tags: string[];
  /** Description of the first stale frame. */
  first?: string;
}

/**
 * Walks frames in log order: a tag never seen before whose start count is
 * at least the current one's is a new incarnation (it becomes the current
 * one); a marker of any other tag — seen before, or counting fewer starts —
 * is stale output of a copy that was superseded.
 */
export function staleOutput(frames: readonly FrameLike[]): StaleReport {
  const text = frames.map((f) => f.text).join("");
  const ends: number[] = [];
  let at = 0;
  for (const f of frames) {
    at += f.text.length;
    ends.push(at);
  }
  const seen = new Set<string>();
  const tags: string[] = [];
  let current: string | undefined;
  const stale = new Set<number>();
  let frame = 0;
  let first: string | undefined;
  for (const m of text.matchAll(MARKER)) {
    const end = (m.index ?? 0) + m[0].length - 1;
    while (frame < ends.length && (ends[frame] ?? 0) <= end) frame++;
    const tag = `${m[1] ?? ""}-${m[2] ?? ""}`;
    const fresh = !seen.has(tag);
    if (fresh) {
      seen.add(tag);
      tags.push(tag);
    }
    // A copy started later counts its starts higher (the count survives checkpoints), so a
    // first sight of a lower count is a superseded copy, even if its earlier lines aged out.
    if (fresh && (current === undefined || startsOf(tag) >= startsOf(current))) {
      current = tag;
    } else if (tag !== current) {
      if (!stale.has(frame)) first ??= `frame ${frame}: ${JSON.stringify(text.slice(Math.max(0, end - 40), end + 20))} after ${current ?? "?"}`;
      stale.add(frame);
    }
  }
  let staleBytes = 0;
  for (const i of stale) staleBytes += frames[i]?.bytes ?? 0;
  return { staleFrames: stale.size, staleBytes, tags, ...(first ? { first } : {}) };
}

export interface ObservedInput {
  tag: string;
  token: string;
  /** The incarnation that had started most recently when this line was recorded. */
  latest: string | undefined;
}

/** The observation file of one session: incarnation starts and every input line each copy received, in order. */
export function readObservations(obsDir: string, sessionId: string): { starts: string[]; inputs: ObservedInput[] } {
  const file = `${obsDir}/${sessionId}`;
  const starts: string[] = [];
  const inputs: ObservedInput[] = [];
  if (!existsSync(file)) return { starts, inputs };
  for (const line of readFileSync(file, "utf8").split("\n")) {
    const m = /^@(\d+-\d+) (.*)$/.exec(line);
    if (!m) continue;
    const tag = m[1] ?? "";
    const rest = (m[2] ?? "").replace(/\r$/, "");
    if (rest === "start") starts.push(tag);
    else inputs.push({ tag, token: rest, latest: starts[starts.length - 1] });
  }
  return { starts, inputs };
}

/** The n of a tag `<n>-<r>`. */
export function startsOf(tag: string): number {
  return Number(tag.split("-")[0]);
}
