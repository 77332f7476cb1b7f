import { DeliverPolicy, jetstream, type ConsumerMessages } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { PULL_OPTIONS } from "@paddock/bus";
import {
  EXEC_CHUNK_MAX_BYTES,
  EXEC_CREDIT_HEARTBEAT_MS,
  ExecCreditReply,
  execCreditSubject,
  ExecExit,
  Headers,
  Streams,
  Subjects,
  type ExecCredit,
} from "@paddock/contracts";
import type { Every } from "../context.ts";

/** A pull asks for bytes, not messages: 256 chunks of 256 KiB would be 64 MiB on this gateway for one reader. */
const EXEC_PULL = { max_bytes: 8 * EXEC_CHUNK_MAX_BYTES, expires: PULL_OPTIONS.expires } as const;

/** Credit is sent once this much more was taken (the runner's window is far larger: it never waits on a credit in flight). */
const CREDIT_STEP_BYTES = 512 * 1024;

export type ExecOutputItem =
  | { kind: "chunk"; stream: "stdout" | "stderr"; bytes: Uint8Array }
  | { kind: "exit"; exit: ExecExit }
  /** The runner no longer holds the process (it restarted, or lost the session) or stopped answering: there will be no exit. */
  | { kind: "lost"; reason: string };

export interface ExecOutputOptions {
  nc: NatsConnection;
  every: Every;
  poolId: string;
  runnerId: string;
  sessionId: string;
  execId: string;
  /** Read from this EXEC sequence on (a background process's cursor); from its start when absent. */
  fromSeq?: number;
  /** Grant the runner credit as output is taken (the exec route); a cursor read of a background process does not. */
  attached: boolean;
}

/**
 * One exec'd process's output as the gateway reads it: an ordered consumer
 * on its EXEC subject (the runner the record names, nobody else's), from
 * its start, until its exit. While attached, what the caller took is
 * credited back to the runner as it goes; attached or not, a heartbeat asks
 * the runner every EXEC_CREDIT_HEARTBEAT_MS whether it still holds the
 * process: the read ends `lost` when it does not, or twice does not answer.
 */
export class ExecOutput {
  private messages: ConsumerMessages | undefined;
  private taken = 0;
  private credited = 0;
  private lost: string | undefined;
  private stopHeartbeat: (() => void) | undefined;
  private closed = false;
  /** Heartbeats in a row the runner did not answer (one may be lost to a busy moment; two are not). */
  private misses = 0;

  private constructor(private readonly opts: ExecOutputOptions) {}

  static async open(opts: ExecOutputOptions): Promise<ExecOutput> {
    const out = new ExecOutput(opts);
    const consumer = await jetstream(opts.nc).consumers.get(Streams.exec, {
      filter_subjects: [Subjects.exec(opts.poolId, opts.runnerId, opts.sessionId, opts.execId)],
      ...(opts.fromSeq ? { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: opts.fromSeq } : { deliver_policy: DeliverPolicy.All }),
    });
    out.messages = await consumer.consume(EXEC_PULL);
    // A follow read of a background process asks too: a runner that lost it would otherwise leave the read open forever.
    out.stopHeartbeat = opts.every(EXEC_CREDIT_HEARTBEAT_MS, () => void out.heartbeat());
    return out;
  }

  async *items(): AsyncGenerator<ExecOutputItem & { seq: number }> {
    const messages = this.messages as ConsumerMessages;
    try {
      for await (const m of messages) {
        if (m.headers?.get(Headers.execExit)) {
          const exit = ExecExit.safeParse(m.json());
          yield exit.success ? { kind: "exit", exit: exit.data, seq: m.seq } : { kind: "lost", reason: "the process's exit did not parse", seq: m.seq };
          return;
        }
        const stream = m.headers?.get(Headers.stream) === "stderr" ? "stderr" : "stdout";
        yield { kind: "chunk", stream, bytes: m.data, seq: m.seq };
      }
      if (this.lost) yield { kind: "lost", reason: this.lost, seq: 0 };
    } finally {
      await this.close();
    }
  }

  /** The caller forwarded bytes of output: credited to the runner once a step has gathered. */
  take(bytes: number): void {
    this.taken += bytes;
    if (this.opts.attached && this.taken - this.credited >= CREDIT_STEP_BYTES) this.sendCredit();
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.stopHeartbeat?.();
    await this.messages?.close();
  }

  /** What this reader took; a reader that is not the attached one credits nothing (another reader's window is not its to widen). */
  private credit(): ExecCredit {
    return { sessionId: this.opts.sessionId, execId: this.opts.execId, bytes: this.opts.attached ? this.taken : 0 };
  }

  private sendCredit(): void {
    this.credited = this.taken;
    this.opts.nc.publish(execCreditSubject(this.opts.poolId, this.opts.runnerId), JSON.stringify(this.credit()));
  }

  private async heartbeat(): Promise<void> {
    if (this.closed) return;
    this.credited = this.taken;
    let known: boolean | undefined;
    try {
      const reply = await this.opts.nc.request(execCreditSubject(this.opts.poolId, this.opts.runnerId), JSON.stringify(this.credit()), { timeout: EXEC_CREDIT_HEARTBEAT_MS });
      known = ExecCreditReply.parse(reply.json()).known;
    } catch {
      this.misses += 1;
    }
    if (known) this.misses = 0;
    if (known === true || this.closed || (known === undefined && this.misses < 2)) return;
    this.lost = "the runner holding the session no longer has the process";
    await this.messages?.close();
  }
}
