// The screen worker (screen-host.ts starts it): the runner's screen
// emulators, parsed off the runner's event loop. Messages for one screen
// arrive in the order they were posted, so a capture is taken exactly after
// the writes before it.
import { parentPort } from "node:worker_threads";
import { ScreenEmulator } from "@paddock/screen";
import type { FromScreenWorker, ToScreenWorker } from "./screen-host.ts";

const port = parentPort;
if (!port) throw new Error("screen-worker.ts runs as a worker thread");

/** How often a screen whose parser is still busy reports again. */
const REPORT_EVERY_MS = 20;

interface Held {
  emulator: ScreenEmulator;
  /** Bytes received so far (what the host has written). */
  received: number;
  /** The last count of parsed bytes sent. */
  reported: number;
  /** A report is queued. */
  reporting: boolean;
}

const screens = new Map<number, Held>();
const send = (m: FromScreenWorker) => port.postMessage(m);

/**
 * How far the parser got (received less the emulator's backlog, which counts
 * plain text it holds back): at most once per turn of this thread's loop,
 * then again every REPORT_EVERY_MS while the parser is at work, so a burst
 * that finished parsing is not left counted as backlog.
 */
function report(id: number, held: Held, delayMs = 0): void {
  if (held.reporting) return;
  held.reporting = true;
  const run = () => {
    held.reporting = false;
    if (screens.get(id) !== held) return;
    const bytes = held.received - held.emulator.backlogBytes;
    if (bytes !== held.reported) {
      held.reported = bytes;
      send({ op: "parsed", id, bytes });
    }
    // The parser is still at work: look again (held-back plain text alone never moves by itself).
    if (held.emulator.parsingBytes > 0) report(id, held, REPORT_EVERY_MS);
  };
  if (delayMs === 0) setImmediate(run);
  else setTimeout(run, delayMs);
}

port.on("message", (m: ToScreenWorker) => {
  switch (m.op) {
    case "open":
      screens.set(m.id, { emulator: new ScreenEmulator(m.size), received: 0, reported: 0, reporting: false });
      return;
    case "write": {
      const held = screens.get(m.id);
      if (!held) return;
      held.emulator.write(m.bytes);
      held.received += m.bytes.byteLength;
      report(m.id, held);
      return;
    }
    case "resize":
      screens.get(m.id)?.emulator.resize(m.size);
      return;
    case "capture": {
      const held = screens.get(m.id);
      if (!held) {
        send({ op: "captured", request: m.request, capture: undefined });
        return;
      }
      void held.emulator.capture(m.maxBytes).then(
        (capture) => send({ op: "captured", request: m.request, capture }),
        () => send({ op: "captured", request: m.request, capture: undefined }),
      );
      return;
    }
    case "dispose":
      screens.get(m.id)?.emulator.dispose();
      screens.delete(m.id);
      return;
  }
});
