import xterm from "@xterm/headless";
import serialize from "@xterm/addon-serialize";
import { scanPlainText, type PlainText } from "./plain-text.ts";

export interface ScreenSize {
  cols: number;
  rows: number;
  /** Lines kept above the screen (and serialized with it). */
  scrollback: number;
}

/** Lines of scrollback kept at most. */
export const MAX_SCROLLBACK_LINES = 1000;
/**
 * Cells (screen and scrollback) an emulator keeps at most, screen allowing:
 * a terminal may be resized to 1000 × 1000, and a gateway holds hundreds of
 * emulators, so wide terminals keep fewer lines of scrollback.
 */
export const MAX_SCREEN_CELLS = 256 * 1024;

/** The emulator size for a terminal of cols × rows: all of the screen, scrollback within MAX_SCREEN_CELLS. */
export function screenSize(cols: number, rows: number): ScreenSize {
  const scrollback = Math.max(0, Math.min(MAX_SCROLLBACK_LINES, Math.floor(MAX_SCREEN_CELLS / cols) - rows));
  return { cols, rows, scrollback };
}

/** An 80 × 24 terminal with 1,000 lines of scrollback (where every app's terminal starts). */
export const DEFAULT_SCREEN_SIZE: ScreenSize = screenSize(80, 24);

/** A serialized screen and the terminal size it repaints at. */
export interface Capture {
  screen: string;
  cols: number;
  rows: number;
}

/** Plain text held back from the parser beyond this is parsed after all (very long lines, LF-only output). */
const MAX_HELD_BYTES = 4 * 1024 * 1024;
const MAX_HELD_PIECES = 4096;
const EMPTY = "";

interface Held extends PlainText {
  bytes: Uint8Array;
  /** Line feeds held before this piece (since the run began). */
  lineFeedsBefore: number;
}

/** The parts of xterm's core the plain-text shortcut reads (not public API; absent shapes disable it). */
interface CoreProbe {
  _core?: {
    _inputHandler?: { _parser?: { currentState?: number }; _utf8Decoder?: { interim?: Uint8Array } };
    buffer?: { scrollTop?: number; scrollBottom?: number };
  };
}

/**
 * A headless terminal (xterm.js) that renders a log into a screen snapshot
 * (alternate-screen programs repaint correctly).
 *
 * Parsing is the cost (~20 MB/s on the bench machine), so plain text (see
 * plain-text.ts) that can no longer show is never parsed: when a run of plain
 * text starts with the parser at rest (ground state, no partial UTF-8
 * character, no scroll region), everything before the last 2 × (rows +
 * scrollback) line feeds that follow a carriage return is dropped. Those line
 * feeds move the cursor to the bottom and scroll every earlier row out of the
 * screen and the scrollback, and plain text changes no other state, so the
 * screen and scrollback are exactly what parsing everything gives. A log of
 * bulk output costs a byte scan, not a parse.
 *
 * Long lines without any line break (printable ASCII only, "flat") are cut
 * the same way by columns: with autowrap on and insert mode off, each byte
 * takes the next cell and wraps at the last column, so a byte's column is
 * fixed by its distance from the run's end modulo the width. Dropping a
 * multiple of `cols` bytes from the front of a flat run, while more than
 * 2 × (rows + scrollback + 1) lines' worth stay, leaves every kept byte in
 * the cell it would have taken, and everything before it scrolled out of the
 * screen and the scrollback either way.
 */
export class ScreenEmulator {
  /** The size as of everything written so far (resizes included), parsed or not. */
  private current: ScreenSize;
  private readonly term: xterm.Terminal;
  private readonly addon: serialize.SerializeAddon;
  private keepLineFeeds: number;
  private disposed = false;
  /** Bytes handed to the parser and not parsed yet. */
  private unparsed = 0;
  private waiters: Array<{ limit: number; resolve: () => void }> = [];
  /** The held run: pieces held[heldHead..], oldest first (dropped ones are cleared: they must not stay reachable). */
  private held: Array<Held | undefined> = [];
  private heldHead = 0;
  private heldBytes = 0;
  private heldLineFeeds = 0;
  /** Indexes into held of the pieces holding a CR, oldest first. */
  private withCR: number[] = [];
  /** Whether the parser was at rest where the held run starts; undefined until the check ran. */
  private runAtRest: boolean | undefined;
  /** Whether, there, printing wraps at the last column and overwrites (autowrap on, insert mode off). */
  private runWraps = false;
  /** Whether every held piece is flat (printable ASCII only). */
  private heldFlat = true;
  private runId = 0;
  /** Plain-text bytes dropped without parsing (tests and metrics). */
  skippedBytes = 0;

  constructor(size: ScreenSize = DEFAULT_SCREEN_SIZE) {
    this.current = size;
    this.term = new xterm.Terminal({ cols: size.cols, rows: size.rows, scrollback: size.scrollback, allowProposedApi: true });
    this.addon = new serialize.SerializeAddon();
    this.term.loadAddon(this.addon as never);
    this.keepLineFeeds = 2 * (size.rows + size.scrollback);
  }

  /** Feeds output bytes, in order. Never blocks; see backlogBytes and parsedBelow for flow control. */
  write(bytes: Uint8Array): void {
    if (this.disposed || bytes.byteLength === 0) return;
    const scan = scanPlainText(bytes);
    if (!scan.plain) {
      this.release();
      this.parse(bytes);
      return;
    }
    if (this.heldCount() === 0) this.startRun();
    if (scan.hasCR) this.withCR.push(this.held.length);
    this.held.push({ ...scan, bytes, lineFeedsBefore: this.heldLineFeeds });
    this.heldFlat &&= scan.flat;
    this.heldBytes += bytes.byteLength;
    this.heldLineFeeds += scan.lineFeeds;
    this.trim();
  }

  get size(): ScreenSize {
    return this.current;
  }

  /**
   * Resizes the terminal at this point of the output: bytes written before
   * are parsed at the old size, bytes written after at the new one (xterm
   * reflows the normal buffer as a real terminal does).
   */
  resize(size: ScreenSize): void {
    if (this.disposed) return;
    const c = this.current;
    if (c.cols === size.cols && c.rows === size.rows && c.scrollback === size.scrollback) return;
    // Held plain text was written at the old size: it goes to the parser first (and its run ends).
    this.release();
    this.runId++;
    this.runAtRest = undefined;
    this.current = size;
    this.keepLineFeeds = 2 * (size.rows + size.scrollback);
    // xterm resizes at once, its parser works through a queue: resize once the queue before it is parsed.
    this.term.write(EMPTY, () => {
      if (this.disposed) return;
      this.term.options.scrollback = size.scrollback;
      this.term.resize(size.cols, size.rows);
    });
  }

  /** Bytes written and not parsed yet (plain text held back included). */
  get backlogBytes(): number {
    return this.unparsed + this.heldBytes;
  }

  /** Bytes handed to the parser and not parsed yet (plain text held back not counted). */
  get parsingBytes(): number {
    return this.unparsed;
  }

  /** Resolves once fewer than limit bytes wait for the parser (xterm drops writes beyond 50 MB pending). */
  parsedBelow(limit: number): Promise<void> {
    if (this.unparsed < limit || this.disposed) return Promise.resolve();
    return new Promise((resolve) => this.waiters.push({ limit, resolve }));
  }

  /**
   * The serialized screen and scrollback once everything written is parsed.
   * With maxBytes, scrollback is cut (halved until it fits); undefined when
   * even the screen alone does not fit, or once disposed.
   */
  async snapshot(maxBytes?: number): Promise<string | undefined> {
    return (await this.capture(maxBytes))?.screen;
  }

  /**
   * Like snapshot, with the size the screen repaints at. Serialized exactly
   * after what was written before the call: in the parser's callback, before
   * anything written later is parsed.
   */
  capture(maxBytes?: number): Promise<Capture | undefined> {
    this.release();
    return new Promise((resolve) =>
      // The socket may have closed (and disposed us) while the parser caught up.
      this.term.write(EMPTY, () => resolve(this.disposed ? undefined : this.serialize(maxBytes))),
    );
  }

  /** The rows of the screen as shown (the active buffer), as plain text without trailing blanks. */
  visibleRows(): Promise<string[]> {
    this.release();
    return new Promise((resolve) =>
      this.term.write(EMPTY, () => {
        const buffer = this.term.buffer.active;
        const rows: string[] = [];
        for (let y = 0; y < this.term.rows; y++) rows.push(buffer.getLine(buffer.viewportY + y)?.translateToString(true) ?? "");
        resolve(rows);
      }),
    );
  }

  private serialize(maxBytes: number | undefined): Capture | undefined {
    const size = { cols: this.term.cols, rows: this.term.rows };
    let scrollback: number | undefined;
    for (;;) {
      const text = this.addon.serialize(scrollback === undefined ? {} : { scrollback });
      if (maxBytes === undefined || Buffer.byteLength(text) <= maxBytes) return { screen: text, ...size };
      if (scrollback === 0) return undefined;
      scrollback = Math.floor((scrollback ?? this.term.buffer.normal.length) / 2);
    }
  }

  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    this.clearHeld();
    this.term.dispose();
    for (const w of this.waiters) w.resolve();
    this.waiters = [];
  }

  private parse(bytes: Uint8Array): void {
    this.unparsed += bytes.byteLength;
    this.term.write(bytes, () => {
      this.unparsed -= bytes.byteLength;
      if (this.waiters.length === 0) return;
      const ready = this.waiters.filter((w) => this.unparsed < w.limit);
      this.waiters = this.waiters.filter((w) => this.unparsed >= w.limit);
      for (const w of ready) w.resolve();
    });
  }

  /** The parser's state where the held run starts (it has parsed everything before). */
  private judgeRun(): void {
    this.runAtRest = atRestForText(this.term);
    this.runWraps = wrapsText(this.term);
  }

  /** A plain run begins after everything already with the parser: check its state once that is parsed. */
  private startRun(): void {
    const id = ++this.runId;
    // Nothing waits for the parser: its state is final now.
    if (this.unparsed === 0 && !this.resizing()) {
      this.judgeRun();
      return;
    }
    this.runAtRest = undefined;
    this.term.write(EMPTY, () => {
      if (this.runId !== id || this.disposed) return;
      this.judgeRun();
      this.trim();
    });
  }

  /** Drops held plain text that can no longer show; hands it all to the parser when it cannot be dropped. */
  private trim(): void {
    if (this.runAtRest === false) {
      this.release();
      return;
    }
    if (this.runAtRest === true) {
      while (this.heldCount() > 1 && this.anchoredLineFeedsFrom(this.heldHead + 1) >= this.keepLineFeeds) {
        const dropped = this.held[this.heldHead] as Held;
        this.held[this.heldHead] = undefined;
        this.heldHead++;
        this.heldBytes -= dropped.bytes.byteLength;
        this.skippedBytes += dropped.bytes.byteLength;
      }
      if (this.heldFlat && this.runWraps) this.dropFlatFront();
      // Compact now and then: dropped pieces are not kept alive by the array.
      if (this.heldHead > 64 && this.heldHead * 2 > this.held.length) this.compact();
    }
    if (this.heldBytes > MAX_HELD_BYTES || this.heldCount() > MAX_HELD_PIECES) this.release();
  }

  /** Drops whole lines' worth (a multiple of cols) from the front of a flat run, keeping 2 × (rows + scrollback + 1) lines of it. */
  private dropFlatFront(): void {
    const { cols, rows, scrollback } = this.current;
    const excess = this.heldBytes - 2 * (rows + scrollback + 1) * cols;
    let drop = excess - (excess % cols);
    if (drop <= 0) return;
    this.heldBytes -= drop;
    this.skippedBytes += drop;
    while (drop > 0) {
      const piece = this.held[this.heldHead] as Held;
      if (piece.bytes.byteLength <= drop) {
        drop -= piece.bytes.byteLength;
        this.held[this.heldHead] = undefined;
        this.heldHead++;
      } else {
        this.held[this.heldHead] = { ...piece, bytes: piece.bytes.subarray(drop) };
        drop = 0;
      }
    }
  }

  /** A resize written is not applied yet (the parser has not reached it). */
  private resizing(): boolean {
    return this.term.cols !== this.current.cols || this.term.rows !== this.current.rows;
  }

  private heldCount(): number {
    return this.held.length - this.heldHead;
  }

  /** Line feeds of held[from..] after its first carriage return (0 when it has none). */
  private anchoredLineFeedsFrom(from: number): number {
    while (this.withCR.length > 0 && (this.withCR[0] as number) < from) this.withCR.shift();
    const first = this.withCR[0];
    if (first === undefined) return 0;
    const piece = this.held[first] as Held;
    return this.heldLineFeeds - (piece.lineFeedsBefore + piece.lineFeeds - piece.lineFeedsAfterCR);
  }

  private compact(): void {
    const shift = this.heldHead;
    this.held = this.held.slice(shift);
    this.withCR = this.withCR.map((i) => i - shift);
    this.heldHead = 0;
  }

  private clearHeld(): Held[] {
    const held = this.held.slice(this.heldHead) as Held[];
    this.held = [];
    this.heldHead = 0;
    this.heldBytes = 0;
    this.heldLineFeeds = 0;
    this.heldFlat = true;
    this.withCR = [];
    return held;
  }

  /** Hands the held plain text to the parser (in order) and ends the run. */
  private release(): void {
    if (this.heldCount() === 0) return;
    const held = this.clearHeld();
    this.runId++;
    this.runAtRest = undefined;
    for (const h of held) this.parse(h.bytes);
  }
}

/** Printing wraps at the last column and overwrites (DECAWM on, IRM off): where a flat byte lands depends on its column only. */
function wrapsText(term: xterm.Terminal): boolean {
  const modes = term.modes as xterm.IModes & { wraparoundMode?: boolean };
  return modes.wraparoundMode === true && !modes.insertMode;
}

/** Parser in ground state, no partial UTF-8 character, scroll region the whole screen: plain text then changes nothing else. */
function atRestForText(term: xterm.Terminal): boolean {
  const rows = term.rows;
  const core = (term as unknown as CoreProbe)._core;
  const parserState = core?._inputHandler?._parser?.currentState;
  const interim = core?._inputHandler?._utf8Decoder?.interim;
  const buffer = core?.buffer;
  return parserState === 0 && interim !== undefined && interim[0] === 0 && buffer?.scrollTop === 0 && buffer.scrollBottom === rows - 1;
}
