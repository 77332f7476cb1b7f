import { COMMAND_STDERR_TAIL_BYTES } from "./backend.ts";

/** The last `max` bytes of a stream: what a command's error says is at its end, and a command printing without end costs no more. */
export class OutputTail {
  private chunks: Buffer[] = [];
  private size = 0;

  constructor(private readonly max = COMMAND_STDERR_TAIL_BYTES) {}

  push(bytes: Uint8Array): void {
    this.chunks.push(Buffer.from(bytes));
    this.size += bytes.byteLength;
    while (this.chunks.length > 1 && this.size - (this.chunks[0]?.length ?? 0) >= this.max) this.size -= this.chunks.shift()?.length ?? 0;
  }

  text(): string {
    const all = Buffer.concat(this.chunks);
    return all.subarray(Math.max(0, all.length - this.max)).toString("utf8");
  }
}
