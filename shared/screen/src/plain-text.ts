/**
 * Plain text: bytes that only print characters and move the cursor down or
 * to the line start, and so change nothing a terminal keeps beyond the cells
 * they write and where the cursor is: printable ASCII, TAB, CR, LF, and UTF-8
 * sequences other than the C1 controls (U+0080..U+009F, encoded C2 80..C2 9F).
 * No ESC (every escape sequence), no BS (it may move up a line), no SO/SI
 * (charset shifts), no other C0 control.
 */
export interface PlainText {
  /** True when every byte is plain text. */
  plain: boolean;
  /** Line feeds it holds (counted only when plain). */
  lineFeeds: number;
  /** Whether it holds a CR, and how many of its line feeds come after the first one. */
  hasCR: boolean;
  lineFeedsAfterCR: number;
  /** Printable ASCII only (no TAB, CR, LF or UTF-8): each byte one cell, left to right. */
  flat: boolean;
}

const NOT_PLAIN: PlainText = { plain: false, lineFeeds: 0, hasCR: false, lineFeedsAfterCR: 0, flat: false };

const LF = 0x0a;
const CR = 0x0d;
const TAB = 0x09;

export function scanPlainText(bytes: Uint8Array): PlainText {
  let lineFeeds = 0;
  let flat = true;
  let firstCR = -1;
  let lineFeedsAtCR = 0;
  const n = bytes.length;
  // Four bytes at a time over aligned words: a word of printable ASCII only
  // (no byte below 0x20 or above 0x7e) is passed whole; any other word (or a
  // false alarm of the bit tricks) is looked at byte by byte. Output is mostly
  // long runs of printable ASCII, so this is several times faster.
  const head = Math.min(n, (4 - (bytes.byteOffset & 3)) & 3);
  const words = (n - head) >>> 2;
  const view = words > 0 ? new Uint32Array(bytes.buffer, bytes.byteOffset + head, words) : undefined;
  const wordsEnd = head + words * 4;
  let i = 0;
  while (i < n) {
    if (view !== undefined && i >= head && i < wordsEnd && ((i - head) & 3) === 0) {
      const w = view[(i - head) >>> 2] as number;
      if (((w - 0x20202020) & ~w & 0x80808080) === 0 && (((w + 0x01010101) | w) & 0x80808080) === 0) {
        i += 4;
        continue;
      }
    }
    const b = bytes[i] as number;
    i++;
    if (b >= 0x20 && b < 0x7f) continue;
    flat = false;
    if (b === LF) {
      lineFeeds++;
      continue;
    }
    if (b === CR) {
      if (firstCR < 0) {
        firstCR = i - 1;
        lineFeedsAtCR = lineFeeds;
      }
      continue;
    }
    if (b === TAB) continue;
    if (b < 0x80) return NOT_PLAIN;
    // C2 80..9F is a C1 control (U+0080..U+009F); a C2 at the very end may start one.
    if (b === 0xc2) {
      const next = i < n ? (bytes[i] as number) : -1;
      if (next === -1 || (next >= 0x80 && next <= 0x9f)) return NOT_PLAIN;
    }
  }
  return { plain: true, lineFeeds, hasCR: firstCR >= 0, lineFeedsAfterCR: firstCR >= 0 ? lineFeeds - lineFeedsAtCR : 0, flat };
}
