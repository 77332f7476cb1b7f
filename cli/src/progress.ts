import { Transform, type TransformCallback, type Writable } from "node:stream";

/** Human bytes: 1.5 MiB. */
export function formatBytes(n: number): string {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = n;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return i === 0 ? `${n} B` : `${v.toFixed(1)} ${units[i]}`;
}

/**
 * A one-line progress bar on a terminal stderr (nothing when it is not one):
 * `label [#####-----]  42%  1.2 MiB / 3.0 MiB`, or bytes alone without a total.
 * Redrawn at most once per percent (or per 256 KiB without a total).
 */
export class Progress {
  private bytes = 0;
  private drawnAt = -1;

  constructor(
    private readonly out: Writable & { isTTY?: boolean; columns?: number },
    private readonly label: string,
    private readonly total: number | undefined,
  ) {}

  private get enabled(): boolean {
    return this.out.isTTY === true;
  }

  add(n: number): void {
    this.bytes += n;
    if (!this.enabled) return;
    const mark = this.total ? Math.floor((100 * Math.min(this.bytes, this.total)) / this.total) : Math.floor(this.bytes / (256 * 1024));
    if (mark === this.drawnAt) return;
    this.drawnAt = mark;
    this.draw();
  }

  /** Draws the final state and ends the line. */
  done(): void {
    if (!this.enabled) return;
    this.draw();
    this.out.write("\n");
  }

  private draw(): void {
    let line = `${this.label} ${formatBytes(this.bytes)}`;
    if (this.total) {
      const ratio = Math.min(1, this.bytes / this.total);
      const width = Math.max(10, Math.min(40, (this.out.columns ?? 80) - this.label.length - 40));
      const filled = Math.round(ratio * width);
      line = `${this.label} [${"#".repeat(filled)}${"-".repeat(width - filled)}] ${String(Math.round(ratio * 100)).padStart(3)}%  ${formatBytes(this.bytes)} / ${formatBytes(this.total)}`;
    }
    this.out.write(`\r\x1b[2K${line}`);
  }
}

/** Passes bytes through, reporting each chunk's size. */
export function counter(onBytes: (n: number) => void): Transform {
  return new Transform({
    transform(chunk: Buffer, _enc: BufferEncoding, cb: TransformCallback) {
      onBytes(chunk.length);
      cb(null, chunk);
    },
  });
}
