/**
 * Controller input before the session runs: which states hold it, the bound
 * on what is held, and the queue itself (Attachment forwards it in order once
 * the record says running); also the parse of a client's text frame.
 */
import { ClientFrame, type SessionState } from "@paddock/contracts";

/** States whose session will run but has no process taking input yet: a controller's input is held. */
export const HOLD_INPUT_STATES: ReadonlySet<SessionState> = new Set(["queued", "creating"]);
/** Input held per controller until the session runs; past it, the socket is not read until it runs. */
export const MAX_HELD_INPUT_BYTES = 64 * 1024;

export type Resize = { cols: number; rows: number };

/**
 * Input sent before the app runs (a piped stdin, keys typed while the
 * session starts) is held and forwarded in order once the record says
 * running: the runner has no process, or no subscription yet, to take it.
 * Past MAX_HELD_INPUT_BYTES the socket is not read until then (readInbox).
 */
export class HeldInput {
  private items: Array<{ bytes: Buffer; resize: Resize | undefined }> = [];
  private bytes = 0;

  /** At the bound: nothing more is read from the socket until the session runs. */
  get full(): boolean {
    return this.bytes >= MAX_HELD_INPUT_BYTES;
  }

  push(bytes: Buffer, resize: Resize | undefined): void {
    this.items.push({ bytes, resize });
    this.bytes += bytes.byteLength;
  }

  /** Everything held, in order; the queue is empty after. */
  drain(): Array<{ bytes: Buffer; resize: Resize | undefined }> {
    const items = this.items;
    this.items = [];
    this.bytes = 0;
    return items;
  }
}

export function parseClientFrame(bytes: Buffer): ClientFrame | undefined {
  let raw: unknown;
  try {
    raw = JSON.parse(bytes.toString("utf8"));
  } catch {
    return undefined;
  }
  const parsed = ClientFrame.safeParse(raw);
  return parsed.success ? parsed.data : undefined;
}
