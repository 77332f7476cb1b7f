import { DeliverPolicy, jetstream } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { Streams, Subjects } from "@paddock/contracts";
import { ScreenEmulator } from "./snapshot.ts";
import { ChunkVerdict, exitCodeOf, judgeChunk, placementGenerationOf, type Placement } from "./termlog.ts";

interface Screen {
  emulator: ScreenEmulator;
  /** The TERM sequence of the last chunk considered (fed, or skipped as not the log's). */
  lastSeq: number;
  /** The placement generation whose output the emulator shows; a newer one starts a fresh screen. */
  generation: number;
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
   * The screen of one app as of chunk `upTo` (catching up from where it was
   * left), fed only with chunks of the given placement (see judgeChunk).
   * Resolves with the serialized screen and the cursor it stands for.
   */
  snapshot(sessionId: string, app: string, upTo: number, placement: Placement): Promise<{ cursor: number; bytes: Buffer }> {
    const key = `${sessionId}.${app}`;
    const screen = this.screenOf(key);
    const run = screen.lock.then(async () => {
      if (upTo > screen.lastSeq) await this.catchUp(Subjects.termOfApp(sessionId, app), screen, upTo, placement);
      return { cursor: screen.lastSeq, bytes: await screen.emulator.snapshot() };
    });
    screen.lock = run.catch(() => undefined);
    return run;
  }

  dispose(): void {
    for (const s of this.screens.values()) s.emulator.dispose();
    this.screens.clear();
  }

  private screenOf(key: string): Screen {
    const held = this.screens.get(key);
    if (held) {
      // Most recently used last.
      this.screens.delete(key);
      this.screens.set(key, held);
      return held;
    }
    const screen: Screen = { emulator: new ScreenEmulator(), lastSeq: 0, generation: 0, lock: Promise.resolve() };
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

  private async catchUp(filter: string, screen: Screen, upTo: number, placement: Placement): Promise<void> {
    const consumer = await jetstream(this.nc).consumers.get(Streams.term, {
      filter_subjects: [filter],
      deliver_policy: DeliverPolicy.StartSequence,
      opt_start_seq: screen.lastSeq + 1,
    });
    let pending = (await consumer.info()).num_pending;
    if (pending === 0) return;
    const messages = await consumer.consume({ max_messages: 256 });
    try {
      for await (const m of messages) {
        const verdict = judgeChunk(m.subject, m.headers, placement);
        // A newer placement than the caller knows: stop before it; the attachment re-reads the record.
        if (verdict === ChunkVerdict.ahead) break;
        if (verdict === ChunkVerdict.live && exitCodeOf(m.headers) === undefined) this.feed(screen, placementGenerationOf(m.headers), m.data);
        screen.lastSeq = m.seq;
        if (m.seq >= upTo || --pending === 0) break;
      }
    } finally {
      await messages.close();
    }
  }

  /** A new placement is a new terminal: its screen starts blank, not on top of the old one's. */
  private feed(screen: Screen, generation: number, bytes: Uint8Array): void {
    if (generation > screen.generation) {
      if (screen.generation !== 0) {
        screen.emulator.dispose();
        screen.emulator = new ScreenEmulator();
      }
      screen.generation = generation;
    }
    screen.emulator.write(bytes);
  }
}
