import { Worker } from "node:worker_threads";
import { ScreenEmulator, type Capture, type ScreenSize } from "@paddock/screen";

/** What a screen tracker needs of an emulator (ScreenEmulator in this thread, or one in the screen worker). */
export interface TrackedScreen {
  write(bytes: Uint8Array): void;
  resize(size: ScreenSize): void;
  /** Bytes written and not parsed yet; Infinity once the screen cannot be kept (its worker died). */
  readonly backlogBytes: number;
  capture(maxBytes?: number): Promise<Capture | undefined>;
  dispose(): void;
}

export type OpenScreen = (size: ScreenSize) => TrackedScreen;

/** An emulator on the caller's thread (tests, and a runner told to keep screens there). */
export const openLocalScreen: OpenScreen = (size) => new ScreenEmulator(size);

/** Messages to the screen worker (screen-worker.ts), in order per screen. */
export type ToScreenWorker =
  | { op: "open"; id: number; size: ScreenSize }
  | { op: "write"; id: number; bytes: Uint8Array }
  | { op: "resize"; id: number; size: ScreenSize }
  | { op: "capture"; id: number; request: number; maxBytes?: number | undefined }
  | { op: "dispose"; id: number };

/** Messages from the screen worker: how far a screen's parser got, and captures. */
export type FromScreenWorker = { op: "parsed"; id: number; bytes: number } | { op: "captured"; request: number; capture: Capture | undefined };

/** The worker's entry: through tsx when this file runs from source (screen-worker-dev.mjs), the bundle's sibling when built (scripts/build.ts). */
function workerEntry(): URL {
  return import.meta.url.endsWith(".ts") ? new URL("./screen-worker-dev.mjs", import.meta.url) : new URL("./screen-worker.js", import.meta.url);
}

/**
 * The runner's screen emulators on a thread of their own. Parsing an
 * escape-heavy app's output for its screen checkpoints costs more than
 * carrying the output (a full-screen repaint: ~19 ms of CPU per MB, beside
 * ~13 ms for reading, committing and publishing it), and checkpoints may
 * lag: off the runner's event loop, it no longer slows the output path or
 * the keystrokes of other sessions. One worker serves every screen of the
 * runner; a worker that dies fails its screens (their trackers give up for
 * that placement, as when an emulator falls behind) and the next screen
 * starts another.
 */
export class ScreenHost {
  private worker: Worker | undefined;
  private readonly screens = new Map<number, RemoteScreen>();
  private readonly captures = new Map<number, (capture: Capture | undefined) => void>();
  private nextId = 1;
  private nextRequest = 1;

  constructor(
    private readonly opts: {
      entry?: URL;
      /** The worker ended or failed unasked (its screens fail; the next screen starts another). */
      onLost?: (err: unknown) => void;
    } = {},
  ) {}

  readonly open: OpenScreen = (size) => {
    const id = this.nextId++;
    const screen = new RemoteScreen(id, (m, transfer) => this.post(m, transfer), (maxBytes) => this.capture(id, maxBytes), () => this.screens.delete(id));
    this.screens.set(id, screen);
    this.post({ op: "open", id, size });
    return screen;
  };

  /** Starts the worker ahead of the first screen. */
  warm(): void {
    this.started();
  }

  /** Ends the worker; the screens it held fail. */
  async stop(): Promise<void> {
    const worker = this.worker;
    this.worker = undefined;
    await worker?.terminate();
    this.failAll();
  }

  private capture(id: number, maxBytes: number | undefined): Promise<Capture | undefined> {
    const request = this.nextRequest++;
    return new Promise((resolve) => {
      this.captures.set(request, resolve);
      this.post({ op: "capture", id, request, maxBytes });
    });
  }

  private post(m: ToScreenWorker, transfer: ArrayBuffer[] = []): void {
    this.started().postMessage(m, transfer);
  }

  private started(): Worker {
    if (this.worker) return this.worker;
    const worker = new Worker(this.opts.entry ?? workerEntry());
    // Screens are best effort: the worker never keeps the runner alive.
    worker.unref();
    worker.on("message", (m: FromScreenWorker) => {
      if (m.op === "parsed") this.screens.get(m.id)?.parsedThrough(m.bytes);
      else {
        this.captures.get(m.request)?.(m.capture);
        this.captures.delete(m.request);
      }
    });
    const lost = (err: unknown) => {
      if (this.worker !== worker) return;
      this.worker = undefined;
      this.failAll();
      this.opts.onLost?.(err);
    };
    worker.on("error", lost);
    worker.on("exit", (code) => lost(new Error(`screen worker exited with code ${code}`)));
    this.worker = worker;
    return worker;
  }

  private failAll(): void {
    for (const screen of this.screens.values()) screen.fail();
    this.screens.clear();
    for (const resolve of this.captures.values()) resolve(undefined);
    this.captures.clear();
  }
}

/** One screen in the worker, as its tracker sees it. */
class RemoteScreen implements TrackedScreen {
  private written = 0;
  private parsed = 0;
  private failed = false;

  constructor(
    private readonly id: number,
    private readonly post: (m: ToScreenWorker, transfer?: ArrayBuffer[]) => void,
    private readonly captureIn: (maxBytes: number | undefined) => Promise<Capture | undefined>,
    private readonly forget: () => void,
  ) {}

  write(bytes: Uint8Array): void {
    if (this.failed || bytes.byteLength === 0) return;
    // A copy of its own, moved (not cloned again) to the worker: the caller's buffer may be pooled.
    const copy = new Uint8Array(bytes);
    this.written += copy.byteLength;
    this.post({ op: "write", id: this.id, bytes: copy }, [copy.buffer as ArrayBuffer]);
  }

  resize(size: ScreenSize): void {
    if (!this.failed) this.post({ op: "resize", id: this.id, size });
  }

  get backlogBytes(): number {
    return this.failed ? Number.POSITIVE_INFINITY : this.written - this.parsed;
  }

  capture(maxBytes?: number): Promise<Capture | undefined> {
    return this.failed ? Promise.resolve(undefined) : this.captureIn(maxBytes);
  }

  dispose(): void {
    if (!this.failed) this.post({ op: "dispose", id: this.id });
    this.failed = true;
    this.forget();
  }

  parsedThrough(bytes: number): void {
    this.parsed = bytes;
  }

  fail(): void {
    this.failed = true;
  }
}
