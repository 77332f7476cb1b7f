import type { JetStreamManager, StoredMsg } from "@nats-io/jetstream";
import { decodeJson } from "@paddock/bus";
import { INITIAL_TERMINAL_SIZE, ScreenCheckpoint, Streams, Subjects, type TerminalSize } from "@paddock/contracts";
import { ScreenEmulator, screenSize } from "@paddock/screen";
import type { GatewayMetrics } from "../metrics.ts";
import { ChunkVerdict, exitCodeOf, judgeCheckpoint, judgeChunk, lastSeqOf, placementGenerationOf, readRange, terminalSizeOf, type Placement } from "./termlog.ts";

/** Unparsed bytes an emulator may hold before its feeder waits (xterm drops writes past 50 MB pending). */
const PARSE_BACKLOG_BYTES = 4 * 1024 * 1024;

/** A screen as of a cursor: what `since=screen` sends before the chunks after it. */
export interface Snapshot {
  cursor: number;
  bytes: Buffer;
}

interface Screen {
  emulator: ScreenEmulator;
  /** The TERM sequence of the last message considered (fed, or skipped as not the log's). */
  lastSeq: number;
  /** The placement generation whose output the emulator shows; a newer one starts a fresh screen. */
  generation: number;
  /**
   * A live exit marker the considered log ends with, and the sequence before
   * it: the snapshot's cursor stays before the marker, so the attachment still
   * delivers it (exit frame, close) as any other reader of the log would.
   */
  exitAt: number | undefined;
  beforeExit: number;
}

/** What the log holds after a cursor, as far as a screen is concerned. */
interface Position {
  lastSeq: number;
  exitAt: number | undefined;
  beforeExit: number;
}

const cursorOf = (p: Position) => (p.exitAt !== undefined ? p.beforeExit : p.lastSeq);

/**
 * Screen snapshots for `since=screen`. The cost of the first frame must not
 * grow with the log, so a snapshot starts from the placed runner's latest
 * screen checkpoint (SCREENS; written by the runner, which sees every byte)
 * and only the chunks after it are rendered. Without a usable checkpoint the
 * whole retained log is replayed into an emulator (plain text is mostly
 * skipped: see @paddock/screen). Emulators are kept per session app and fed
 * incrementally, so a later attach only renders what is new. Bounded (LRU).
 */
export class ScreenCache {
  private readonly screens = new Map<string, Screen>();
  /** Serialises the snapshots of one app. */
  private readonly locks = new Map<string, Promise<unknown>>();

  constructor(
    private readonly jsm: () => Promise<JetStreamManager>,
    private readonly metrics: Pick<GatewayMetrics, "screenSnapshots" | "droppedCheckpoints">,
    private readonly maxScreens = 256,
  ) {}

  /**
   * The screen of one app as of chunk `upTo` or later, built only from chunks
   * (and a checkpoint) of the given placement (see judgeChunk).
   */
  snapshot(sessionId: string, app: string, upTo: number, placement: Placement): Promise<Snapshot> {
    const key = `${sessionId}.${app}`;
    const run = (this.locks.get(key) ?? Promise.resolve()).then(() => this.render(key, sessionId, app, upTo, placement));
    const settled = run.catch(() => undefined);
    this.locks.set(key, settled);
    void settled.then(() => {
      if (this.locks.get(key) === settled) this.locks.delete(key);
    });
    return run;
  }

  dispose(): void {
    for (const s of this.screens.values()) s.emulator.dispose();
    this.screens.clear();
  }

  private async render(key: string, sessionId: string, app: string, upTo: number, placement: Placement): Promise<Snapshot> {
    if (upTo === 0) {
      this.metrics.screenSnapshots.inc({ source: "empty" });
      return { cursor: 0, bytes: Buffer.alloc(0) };
    }
    const jsm = await this.jsm();
    const filter = Subjects.termOfApp(sessionId, app);
    let screen = this.touch(key);
    const current = screen !== undefined && screen.generation === placement.placementGeneration;
    if (screen && current && screen.lastSeq >= upTo) return this.serialize(screen, "cached");
    const checkpoint = await this.checkpointOf(jsm, sessionId, app, placement, upTo);
    if (checkpoint && !(screen && current && screen.lastSeq >= checkpoint.cursor)) {
      return this.fromCheckpoint(jsm, key, filter, checkpoint, upTo, placement);
    }
    screen ??= this.create(key);
    for await (const m of readRange(jsm, Streams.term, filter, screen.lastSeq + 1, upTo)) {
      if (!(await this.consider(screen, m, placement))) break;
    }
    return this.serialize(screen, current ? "cached" : "replay");
  }

  /**
   * The checkpoint, and what the log holds after it: when nothing after it
   * shows (an exit marker, another runner's chunks), its screen is the
   * snapshot as is; otherwise it seeds an emulator that renders the rest.
   */
  private async fromCheckpoint(
    jsm: JetStreamManager,
    key: string,
    filter: string,
    checkpoint: ScreenCheckpoint,
    upTo: number,
    placement: Placement,
  ): Promise<Snapshot> {
    const at: Position = { lastSeq: checkpoint.cursor, exitAt: undefined, beforeExit: 0 };
    const before: StoredMsg[] = [];
    let screen: Screen | undefined;
    for await (const m of readRange(jsm, Streams.term, filter, checkpoint.cursor + 1, upTo)) {
      if (!screen) {
        const verdict = judgeChunk(m.subject, m.header, placement);
        if (verdict === ChunkVerdict.ahead) break;
        if (verdict !== ChunkVerdict.live || exitCodeOf(m.header) !== undefined) {
          note(at, m, verdict);
          before.push(m);
          continue;
        }
        screen = this.seed(key, checkpoint, placement);
        for (const b of before) await this.consider(screen, b, placement);
      }
      if (!(await this.consider(screen, m, placement))) break;
    }
    if (screen) return this.serialize(screen, "checkpoint_tail");
    this.metrics.screenSnapshots.inc({ source: "checkpoint" });
    return { cursor: cursorOf(at), bytes: Buffer.from(checkpoint.screen, "utf8") };
  }

  /**
   * The placed runner's latest checkpoint of the app, when it stands for this
   * placement's log (judged like a chunk) and parses; counted when not.
   */
  private async checkpointOf(jsm: JetStreamManager, sessionId: string, app: string, placement: Placement, upTo: number): Promise<ScreenCheckpoint | undefined> {
    const { poolId, runnerId } = placement;
    if (poolId === undefined || runnerId === undefined) return undefined;
    let m: StoredMsg | null;
    try {
      m = await jsm.direct.getMessage(Streams.screens, { last_by_subj: Subjects.screen(poolId, runnerId, sessionId, app) });
    } catch {
      // None (or no SCREENS stream yet): the log is replayed instead.
      return undefined;
    }
    if (!m) return undefined;
    const verdict = judgeCheckpoint(m.subject, m.header, placement);
    if (verdict !== ChunkVerdict.live) {
      this.metrics.droppedCheckpoints.inc({ reason: verdict });
      return undefined;
    }
    const decoded = decodeJson(ScreenCheckpoint, m.data);
    if (!decoded.ok) {
      this.metrics.droppedCheckpoints.inc({ reason: "invalid" });
      return undefined;
    }
    // Written after the attach read the log's end: fine, unless it names a chunk the log never had.
    if (decoded.value.cursor > upTo && decoded.value.cursor > (await lastSeqOf(jsm, Streams.term, Subjects.termOfApp(sessionId, app)))) {
      this.metrics.droppedCheckpoints.inc({ reason: "beyond_log" });
      return undefined;
    }
    return decoded.value;
  }

  /** Considers one message of the log; false at a newer placement than the caller knows (it re-reads the record). */
  private async consider(screen: Screen, m: StoredMsg, placement: Placement): Promise<boolean> {
    const verdict = judgeChunk(m.subject, m.header, placement);
    if (verdict === ChunkVerdict.ahead) return false;
    if (verdict === ChunkVerdict.live && exitCodeOf(m.header) === undefined) {
      const size = terminalSizeOf(m.header);
      if (size === undefined) this.feed(screen, placementGenerationOf(m.header), m.data);
      else if (size !== null) this.enter(screen, placementGenerationOf(m.header)).resize(emulatorSize(size));
      if (screen.emulator.backlogBytes > PARSE_BACKLOG_BYTES) await screen.emulator.parsedBelow(PARSE_BACKLOG_BYTES);
    }
    note(screen, m, verdict);
    return true;
  }

  private feed(screen: Screen, generation: number, bytes: Uint8Array): void {
    this.enter(screen, generation).write(bytes);
  }

  /** A new placement is a new terminal: its screen starts blank at the initial size, not on top of the old one's. */
  private enter(screen: Screen, generation: number): ScreenEmulator {
    if (generation > screen.generation) {
      if (screen.generation !== 0) {
        screen.emulator.dispose();
        screen.emulator = new ScreenEmulator(emulatorSize(INITIAL_TERMINAL_SIZE));
      }
      screen.generation = generation;
    }
    return screen.emulator;
  }

  private async serialize(screen: Screen, source: string): Promise<Snapshot> {
    const text = await screen.emulator.snapshot();
    this.metrics.screenSnapshots.inc({ source });
    return { cursor: cursorOf(screen), bytes: Buffer.from(text ?? "", "utf8") };
  }

  /** The held screen of key (most recently used last). */
  private touch(key: string): Screen | undefined {
    const held = this.screens.get(key);
    if (held) {
      this.screens.delete(key);
      this.screens.set(key, held);
    }
    return held;
  }

  private create(key: string): Screen {
    return this.store(key, { emulator: new ScreenEmulator(emulatorSize(INITIAL_TERMINAL_SIZE)), lastSeq: 0, generation: 0, exitAt: undefined, beforeExit: 0 });
  }

  /** An emulator showing the checkpoint's screen, at its size, as of its cursor. */
  private seed(key: string, checkpoint: ScreenCheckpoint, placement: Placement): Screen {
    const emulator = new ScreenEmulator(emulatorSize(checkpoint));
    emulator.write(Buffer.from(checkpoint.screen, "utf8"));
    return this.store(key, { emulator, lastSeq: checkpoint.cursor, generation: placement.placementGeneration, exitAt: undefined, beforeExit: 0 });
  }

  private store(key: string, screen: Screen): Screen {
    this.screens.get(key)?.emulator.dispose();
    this.screens.delete(key);
    this.screens.set(key, screen);
    if (this.screens.size > this.maxScreens) {
      const [oldest] = this.screens.keys();
      if (oldest !== undefined) {
        this.screens.get(oldest)?.emulator.dispose();
        this.screens.delete(oldest);
      }
    }
    return screen;
  }
}

/** Moves a position past one message: a live exit marker is remembered, a live chunk after it forgets it. */
function note(p: Position, m: StoredMsg, verdict: ChunkVerdict): void {
  if (verdict === ChunkVerdict.live) {
    if (exitCodeOf(m.header) === undefined) p.exitAt = undefined;
    else if (p.exitAt === undefined) {
      p.exitAt = m.seq;
      p.beforeExit = p.lastSeq;
    }
  }
  p.lastSeq = m.seq;
}

function emulatorSize(size: TerminalSize) {
  return screenSize(size.cols, size.rows);
}
