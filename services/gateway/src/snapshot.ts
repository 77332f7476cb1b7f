import xterm from "@xterm/headless";
import serialize from "@xterm/addon-serialize";

/**
 * A headless terminal the retained log is replayed into, to render a screen
 * snapshot (alternate-screen programs repaint correctly). Replaying the whole
 * retained log on each attach is the simple version; an incremental emulator
 * per session app is a later step.
 */
export class ScreenEmulator {
  private readonly term: xterm.Terminal;
  private readonly addon: serialize.SerializeAddon;
  private disposed = false;

  constructor(cols = 80, rows = 24, scrollback = 1000) {
    this.term = new xterm.Terminal({ cols, rows, scrollback, allowProposedApi: true });
    this.addon = new serialize.SerializeAddon();
    this.term.loadAddon(this.addon as never);
  }

  /** Queues bytes; writes are parsed in order. */
  write(bytes: Uint8Array): void {
    this.term.write(bytes);
  }

  /** Resolves once every queued write is parsed, with the serialized screen. */
  async snapshot(): Promise<Buffer> {
    await new Promise<void>((resolve) => this.term.write("", resolve));
    // The socket may have closed (and disposed us) while the parser caught up.
    if (this.disposed) return Buffer.alloc(0);
    return Buffer.from(this.addon.serialize(), "utf8");
  }

  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    this.term.dispose();
  }
}
