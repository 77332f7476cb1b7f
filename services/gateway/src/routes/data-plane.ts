/**
 * Dialling a runner's data plane (decision 0052): the runner answered an rpc
 * with where its bytes wait and a single-use ticket; the connection is theirs
 * once the ticket is written.
 */
import { connect as netConnect, type Socket } from "node:net";
import { once } from "node:events";
import { Transform, type Writable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { UnavailableError, type DataPlaneOffer } from "@paddock/contracts";
import type { Logger } from "@paddock/logging";

/** A runner whose data plane could not be dialled is reached on the bus for this long. */
const SHUNNED_MS = 60_000;

/**
 * The gateway's way to runners' data planes, shared by previews and file
 * reads: remembers a runner it could not dial (a firewall, a wrong
 * advertised host) so that, for a while, its bytes are asked for on the bus
 * rather than offered on a data plane that cannot be reached.
 */
export class DataPlaneDialer {
  private readonly shunned = new Map<string, number>();

  constructor(
    private readonly now: () => number,
    private readonly log: Logger,
  ) {}

  /** Whether to ask runnerId (`pool/runner`) for its data plane. */
  usable(runner: string): boolean {
    return (this.shunned.get(runner) ?? 0) <= this.now();
  }

  /** Reaches runner on the bus for a while (it has no data plane, or it cannot be dialled). */
  shun(runner: string): void {
    this.shunned.set(runner, this.now() + SHUNNED_MS);
  }

  /** The offer's connection, or undefined (remembered) when runner's data plane cannot be dialled. */
  async dial(runner: string, offer: DataPlaneOffer): Promise<Socket | undefined> {
    try {
      return await dialDataPlane(offer);
    } catch (err) {
      this.log.warn({ runner, host: offer.host, port: offer.port, err }, "runner's data plane not reachable; its bytes go on the bus for a while");
      this.shun(runner);
      return undefined;
    }
  }
}

/** Dials offer and presents its ticket; resolves once connected. */
export function dialDataPlane(offer: DataPlaneOffer): Promise<Socket> {
  return new Promise((resolve, reject) => {
    // Not half-open: the runner ending its side (the port closed, the session suspending) closes the socket.
    const socket = netConnect({ host: offer.host, port: offer.port, noDelay: true });
    socket.write(Buffer.from(offer.ticket, "base64url"));
    socket.once("connect", () => {
      socket.off("error", reject);
      resolve(socket);
    });
    socket.once("error", reject);
  });
}

/**
 * Copies exactly length bytes from socket into out and ends it; fewer (the
 * runner gone, the file cut short) or more is an error, and out is destroyed
 * rather than ended, so its client sees a cut answer, never a whole-looking
 * one. Either side going away ends both (pipeline).
 */
export async function copyExactly(socket: Socket, out: Writable, length: number): Promise<void> {
  let got = 0;
  const counted = new Transform({
    transform(chunk: Buffer, _enc, callback) {
      got += chunk.byteLength;
      callback(got > length ? new UnavailableError("the runner sent more bytes than the file holds") : null, chunk);
    },
    flush(callback) {
      callback(got === length ? null : new UnavailableError(`the runner sent ${got} of ${length} bytes`));
    },
  });
  try {
    await pipeline(socket, counted, out);
  } catch (err) {
    out.destroy();
    throw err;
  }
}

/**
 * Writes body on socket, half-closes it, and resolves with what the runner
 * answers before its own end (at most maxAnswerBytes); the socket breaking
 * first, or a longer answer, is unavailable.
 */
export async function sendForAnswer(socket: Socket, body: Iterable<Uint8Array> | AsyncIterable<Uint8Array>, maxAnswerBytes: number): Promise<Buffer> {
  const parts: Buffer[] = [];
  let size = 0;
  const answered = new Promise<Buffer>((resolve, reject) => {
    socket.on("data", (bytes: Buffer) => {
      size += bytes.byteLength;
      if (size > maxAnswerBytes) socket.destroy(new UnavailableError("the runner's answer is too long"));
      else parts.push(bytes);
    });
    socket.once("end", () => resolve(Buffer.concat(parts)));
    socket.once("error", reject);
    socket.once("close", () => reject(new UnavailableError("the runner's data plane closed before it answered")));
  });
  // Settled by whoever waits on it; a body that failed is its own error.
  answered.catch(() => undefined);
  try {
    for await (const chunk of body) {
      if (socket.destroyed) break;
      if (!socket.write(chunk)) await Promise.race([once(socket, "drain"), answered]);
    }
    socket.end();
  } catch (err) {
    socket.destroy();
    throw err;
  }
  return answered;
}
