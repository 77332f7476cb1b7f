import { Duplex } from "node:stream";
import { headers as natsHeaders, type Msg, type NatsConnection } from "@nats-io/transport-node";
import { TUNNEL_CHUNK_BYTES, TUNNEL_WINDOW_BYTES, UnavailableError } from "@paddock/contracts";

/** The header naming a tunnel message's kind, and the one numbering its data messages. */
const KIND = "Paddock-Tunnel";
const SEQ = "Paddock-Seq";
const TOOK = "Paddock-Took";

export const TunnelKind = { data: "data", end: "end", abort: "abort", credit: "credit", ping: "ping" } as const;

/** The tunnel broke: a message lost or out of order, the peer aborted or went silent, or it spoke nonsense. */
export class TunnelBrokenError extends UnavailableError {}

export interface TunnelStreamOptions {
  nc: NatsConnection;
  /** Where this end's messages go (the peer subscribes there). */
  sendTo: string;
  /** Calls fn every ms until stopped (injected: tests drive it); each tick sends a ping, two silent ticks break the tunnel. */
  every: (ms: number, fn: () => void) => () => void;
  pingMs: number;
  windowBytes?: number;
}

/**
 * One end of a byte tunnel between a gateway and a runner over core NATS
 * (docs/ports.md): a Duplex whose writes become numbered data messages of
 * at most 64 KiB and whose reads are the peer's. Nothing is lost silently:
 * a message that does not come in order breaks the tunnel (core NATS may
 * drop for a slow consumer, so a gap is an error, never a hole in the
 * bytes), and a writer runs at most a window (1 MiB) ahead of what its peer
 * took, told by credit messages; a full reader stops crediting and the
 * writer waits (backpressure end to end). Each end pings every pingMs; two
 * periods without a word from the peer (a dead runner or gateway) break it.
 * `end()` is a half-close; the tunnel is done once both ends ended.
 */
export class TunnelStream extends Duplex {
  private readonly window: number;
  private seqOut = 0;
  private seqIn = 0;
  private sent = 0;
  private peerTook = 0;
  private took = 0;
  private credited = 0;
  private roomWaiter: (() => void) | undefined;
  /** The reader fell behind (push said stop): what it took is credited when it reads again. */
  private behind = false;
  private endedOut = false;
  private endedIn = false;
  private heard = true;
  private readonly stopTicker: () => void;

  constructor(private readonly opts: TunnelStreamOptions) {
    super({ allowHalfOpen: true, readableHighWaterMark: TUNNEL_CHUNK_BYTES * 4, writableHighWaterMark: TUNNEL_CHUNK_BYTES });
    this.window = opts.windowBytes ?? TUNNEL_WINDOW_BYTES;
    this.stopTicker = opts.every(opts.pingMs, () => this.tick());
  }

  /** One message from the peer (the owner subscribes to this end's receive subject and hands each here). */
  receive(msg: Msg): void {
    if (this.destroyed) return;
    this.heard = true;
    const kind = msg.headers?.get(KIND);
    if (kind === TunnelKind.data) this.onData(msg);
    else if (kind === TunnelKind.credit) this.onCredit(Number(msg.headers?.get(TOOK)));
    else if (kind === TunnelKind.end) {
      this.endedIn = true;
      this.push(null);
    } else if (kind === TunnelKind.abort) this.destroy(new TunnelBrokenError("the other end aborted the tunnel"));
    else if (kind !== TunnelKind.ping) this.destroy(new TunnelBrokenError("a tunnel message of no known kind"));
  }

  override _read(): void {
    this.credit(this.behind);
    this.behind = false;
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (err?: Error | null) => void): void {
    this.send(chunk).then(() => callback(), callback);
  }

  override _final(callback: (err?: Error | null) => void): void {
    this.endedOut = true;
    this.publish(TunnelKind.end);
    callback();
  }

  override _destroy(err: Error | null, callback: (err?: Error | null) => void): void {
    this.stopTicker();
    // Anything but both ends ended cleanly is an abort the peer must hear of.
    if (!(this.endedOut && this.endedIn)) this.publish(TunnelKind.abort);
    this.roomWaiter?.();
    callback(err);
  }

  private async send(chunk: Buffer): Promise<void> {
    for (let at = 0; at < chunk.byteLength; at += TUNNEL_CHUNK_BYTES) {
      const piece = chunk.subarray(at, at + TUNNEL_CHUNK_BYTES);
      while (this.sent + piece.byteLength - this.peerTook > this.window) {
        await new Promise<void>((resolve) => (this.roomWaiter = resolve));
        this.roomWaiter = undefined;
        if (this.destroyed) throw new TunnelBrokenError("the tunnel closed while writing");
      }
      this.seqOut += 1;
      this.sent += piece.byteLength;
      this.publish(TunnelKind.data, piece, [[SEQ, String(this.seqOut)]]);
    }
  }

  private onData(msg: Msg): void {
    const seq = Number(msg.headers?.get(SEQ));
    if (seq !== this.seqIn + 1 || this.endedIn) {
      this.destroy(new TunnelBrokenError(`tunnel message ${seq} came where ${this.seqIn + 1} was due`));
      return;
    }
    this.seqIn = seq;
    this.took += msg.data.byteLength;
    // Credited at once while the reader keeps up; otherwise when it reads again (_read).
    if (this.push(msg.data)) this.credit(false);
    else this.behind = true;
  }

  private onCredit(took: number): void {
    if (!Number.isSafeInteger(took) || took < this.peerTook || took > this.sent) {
      this.destroy(new TunnelBrokenError("a tunnel credit that does not add up"));
      return;
    }
    this.peerTook = took;
    this.roomWaiter?.();
  }

  /** Tells the peer what this end took, every quarter window (or whatever is owed, when asked for more). */
  private credit(owed: boolean): void {
    const due = this.took - this.credited;
    if (due === 0 || (!owed && due < this.window / 4)) return;
    this.credited = this.took;
    this.publish(TunnelKind.credit, undefined, [[TOOK, String(this.took)]]);
  }

  private tick(): void {
    if (!this.heard) {
      this.destroy(new TunnelBrokenError("the other end of the tunnel went silent"));
      return;
    }
    this.heard = false;
    this.publish(TunnelKind.ping);
  }

  private publish(kind: string, data?: Uint8Array, extra: Array<[string, string]> = []): void {
    const h = natsHeaders();
    h.set(KIND, kind);
    for (const [k, v] of extra) h.set(k, v);
    try {
      this.opts.nc.publish(this.opts.sendTo, data ?? new Uint8Array(0), { headers: h });
    } catch (err) {
      if (!this.destroyed) this.destroy(new TunnelBrokenError("the tunnel's connection is closed", { cause: err }));
    }
  }
}
