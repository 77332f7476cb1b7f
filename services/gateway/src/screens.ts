import { DeliverPolicy, jetstream } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { Streams } from "@paddock/contracts";
import { ScreenEmulator } from "./snapshot.ts";
import { exitCodeOf, placementGenerationOf } from "./termlog.ts";

interface Screen {
  emulator: ScreenEmulator;
  /** The TERM sequence of the last chunk fed into the emulator. */
  lastSeq: number;
  /** Serialises catch-ups and snapshots of this screen. */
  lock: Promise<unknown>;
}

/**
 * Headless terminals kept per session app, fed incrementally: an attach with
 * `since=screen` only feeds the chunks written since the previous attach, so
 * the cost of a snapshot does not grow with the log. Bounded (LRU).
 */
export class ScreenCache {
  private readonly screens = new Map<string, Screen>();

  constructor(
    private readonly nc: NatsConnection,
    private readonly maxScreens = 256,
  ) {}

  /**
   * The screen of `subject` as of chunk `upTo` (catching up from where it was
   * left), skipping chunks older than `minGeneration`. Resolves with the
   * serialized screen and the cursor it stands for.
   */
  snapshot(subject: string, upTo: number, minGeneration: number): Promise<{ cursor: number; bytes: Buffer }> {
    const screen = this.screenOf(subject);
    const run = screen.lock.then(async () => {
      if (upTo > screen.lastSeq) await this.catchUp(subject, screen, upTo, minGeneration);
      return { cursor: screen.lastSeq, bytes: await screen.emulator.snapshot() };
    });
    screen.lock = run.catch(() => undefined);
    return run;
  }

  dispose(): void {
    for (const s of this.screens.values()) s.emulator.dispose();
    this.screens.clear();
  }

  private screenOf(subject: string): Screen {
    const held = this.screens.get(subject);
    if (held) {
      // Most recently used last.
      this.screens.delete(subject);
      this.screens.set(subject, held);
      return held;
    }
    const screen: Screen = { emulator: new ScreenEmulator(), lastSeq: 0, lock: Promise.resolve() };
    this.screens.set(subject, screen);
    if (this.screens.size > this.maxScreens) {
      const [oldest] = this.screens.keys();
      if (oldest !== undefined) {
        this.screens.get(oldest)?.emulator.dispose();
        this.screens.delete(oldest);
      }
    }
    return screen;
  }

  private async catchUp(subject: string, screen: Screen, upTo: number, minGeneration: number): Promise<void> {
    const consumer = await jetstream(this.nc).consumers.get(Streams.term, {
      filter_subjects: [subject],
      deliver_policy: DeliverPolicy.StartSequence,
      opt_start_seq: screen.lastSeq + 1,
    });
    let pending = (await consumer.info()).num_pending;
    if (pending === 0) return;
    const messages = await consumer.consume({ max_messages: 256 });
    try {
      for await (const m of messages) {
        if (exitCodeOf(m.headers) === undefined && placementGenerationOf(m.headers) >= minGeneration) screen.emulator.write(m.data);
        screen.lastSeq = m.seq;
        if (m.seq >= upTo || --pending === 0) break;
      }
    } finally {
      await messages.close();
    }
  }
}
