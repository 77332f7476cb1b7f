/**
 * The console's terminal (issue 27 item 3): xterm.js attached to a session's
 * terminal WebSocket, as controller (keys and resizes go to the app) or as
 * viewer (read-only). Output is written to xterm as bytes; xterm renders text
 * only, never markup. The status line says where the attachment stands.
 */
import { Terminal } from "@xterm/xterm";
import { FitAddon } from "@xterm/addon-fit";
import type { AttachMode } from "@paddock/contracts";
import { h, replace } from "../dom.ts";
import { TerminalConnection, type ConnectionState } from "./connection.ts";
import { StyleMirror, styleCellsThroughCssom } from "./csp.ts";

export interface TerminalOptions {
  sessionId: string;
  app?: string | undefined;
  mode: AttachMode;
  /** Told every change of the attachment's state (connected, reconnecting, ended...). */
  onState?: (kind: ConnectionState["kind"]) => void;
}

export interface MountedTerminal {
  dispose(): void;
}

const RESIZE_DEBOUNCE_MS = 100;
const SCROLLBACK_LINES = 5_000;

/** What a test (or a person in devtools) can ask the mounted terminal element: the buffer's text and the cursor. */
export interface TerminalProbe {
  text(): string;
  cursor(): number | undefined;
  size(): { cols: number; rows: number };
}

function stateText(s: ConnectionState): string {
  switch (s.kind) {
    case "connecting":
      return "connecting…";
    case "connected":
      return `connected (${s.mode}, app ${s.app})`;
    case "reconnecting":
      return `reconnecting… (${s.reason})`;
    case "ended":
      return s.code === null ? "ended" : `ended (exit ${s.code})`;
    case "superseded":
      return "superseded: another controller took over";
    case "closed":
      return `closed: ${s.reason}`;
  }
}

/** User-timing marks of a terminal's open (the bench reads them): mounted, and its first output on screen. */
export const TERMINAL_MARKS = { mount: "paddock:terminal:mount", firstFrame: "paddock:terminal:first-frame" } as const;

export function mountTerminal(container: HTMLElement, opts: TerminalOptions): MountedTerminal {
  performance.mark(TERMINAL_MARKS.mount);
  let framed = false;
  const controller = opts.mode === "controller";
  const status = h("p", { class: "terminal-status", role: "status", "aria-live": "polite", "data-testid": "terminal-status" }, "connecting…");
  const notice = h("p", { class: "terminal-notice", "aria-live": "polite" });
  const superseded = h(
    "p",
    { class: "superseded", role: "alert", "data-testid": "superseded", hidden: true },
    "Another controller attached to this terminal: this one is detached and no longer sends input. Reattach to take control again.",
  );
  const badge = controller ? null : h("span", { class: "badge readonly", "data-testid": "readonly-badge" }, "read-only");
  const screen = h("div", { class: "terminal-screen", "data-testid": "terminal", "aria-label": controller ? "Terminal" : "Terminal (read-only)" });
  replace(container, h("div", { class: "terminal-bar" }, status, badge), superseded, screen, notice);

  const term = new Terminal({
    disableStdin: !controller,
    scrollback: SCROLLBACK_LINES,
    cursorBlink: controller,
    convertEol: false,
    fontFamily: 'ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace',
    fontSize: 14,
    screenReaderMode: false,
  });
  const fit = new FitAddon();
  term.loadAddon(fit);
  const styles = new StyleMirror();

  let disposed = false;
  let lastSize = "";
  const encoder = new TextEncoder();
  const conn = new TerminalConnection(opts.sessionId, opts.mode, opts.app, {
    output: (bytes, reset) => {
      if (reset) term.reset();
      term.write(bytes, () => {
        if (framed) return;
        framed = true;
        // On screen: the frame after the write was parsed.
        requestAnimationFrame(() => performance.mark(TERMINAL_MARKS.firstFrame));
      });
    },
    state: (s) => {
      status.textContent = stateText(s);
      status.dataset.state = s.kind;
      if (s.kind === "superseded") {
        superseded.hidden = false;
        term.options.disableStdin = true;
      }
      if (s.kind === "ended" || s.kind === "closed") term.options.disableStdin = true;
      screen.dataset.state = s.kind;
      opts.onState?.(s.kind);
    },
    notice: (text) => {
      notice.textContent = text;
    },
    opened: () => {
      lastSize = "";
      sendSize();
    },
  });

  const sendSize = () => {
    if (!controller) return;
    const size = `${term.cols}x${term.rows}`;
    if (size === lastSize) return;
    lastSize = size;
    conn.sendResize(term.cols, term.rows);
  };

  if (controller) {
    term.onData((data) => conn.sendInput(encoder.encode(data)));
    term.onBinary((data) => conn.sendInput(Uint8Array.from(data, (c) => c.charCodeAt(0) & 0xff)));
  }
  // Ctrl/Cmd+Shift+C copies the selection; Ctrl/Cmd+Shift+V is left to the browser (a paste event xterm turns into input).
  term.attachCustomKeyEventHandler((ev) => {
    if (ev.type !== "keydown" || !(ev.ctrlKey || ev.metaKey) || !ev.shiftKey) return true;
    if (ev.code === "KeyC") {
      const text = term.getSelection();
      if (text !== "") void navigator.clipboard?.writeText(text).catch(() => undefined);
      ev.preventDefault();
      return false;
    }
    return ev.code !== "KeyV";
  });

  let resizeTimer: ReturnType<typeof setTimeout> | undefined;
  const refit = () => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(() => {
      if (disposed || screen.clientWidth === 0) return;
      fit.fit();
      sendSize();
    }, RESIZE_DEBOUNCE_MS);
  };
  const observer = new ResizeObserver(refit);

  const probe: TerminalProbe = {
    text: () => {
      const buf = term.buffer.active;
      const lines: string[] = [];
      for (let i = 0; i < buf.length; i++) {
        const line = buf.getLine(i);
        if (!line) continue;
        const text = line.translateToString(true);
        if (line.isWrapped && lines.length > 0) lines[lines.length - 1] += text;
        else lines.push(text);
      }
      return lines.join("\n");
    },
    cursor: () => conn.lastCursor,
    size: () => ({ cols: term.cols, rows: term.rows }),
  };
  Object.defineProperty(screen, "paddockTerminal", { value: probe, configurable: true });

  // The ticket request and the socket's handshake run while xterm.js builds its DOM and measures its font.
  conn.start();
  styles.capture(() => term.open(screen));
  styleCellsThroughCssom(term);
  observer.observe(screen);
  fit.fit();
  if (controller) term.focus();

  return {
    dispose() {
      if (disposed) return;
      disposed = true;
      clearTimeout(resizeTimer);
      observer.disconnect();
      conn.close();
      term.dispose();
      styles.dispose();
    },
  };
}
