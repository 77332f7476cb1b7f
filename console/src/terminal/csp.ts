/**
 * xterm.js under the console's Content-Security-Policy (`style-src 'self'`,
 * no 'unsafe-inline'). Its DOM renderer styles itself in two ways a strict
 * policy refuses:
 *
 * - three `<style>` elements (the scrollbar's colours, the row dimensions,
 *   the theme's colours and the 256 palette classes), created and filled from
 *   script: blocked as inline style elements, so the terminal renders without
 *   its colours or row heights;
 * - `setAttribute("style", …)` on a cell for a 24-bit colour (and for
 *   minimum-contrast colours): blocked as an inline style attribute.
 *
 * What CSP does not govern is the CSSOM: constructed stylesheets adopted by
 * the document, and `element.style` set property by property. So while xterm
 * opens, each `<style>` it asks for is a stand-in element instead (a
 * `<paddock-xterm-style>`, never rendered: Chromium checks the policy on every
 * text change of a real `<style>`, whatever its type, and reports each one),
 * whose text is mirrored into a constructed stylesheet; and the row
 * factory's one style-attribute writer sets the same declarations through
 * `element.style`. Nothing here ever parses terminal output as markup.
 */
import type { Terminal } from "@xterm/xterm";

/** The stand-in for xterm's `<style>` elements (style.css hides it). */
const STAND_IN = "paddock-xterm-style";

interface Mirror {
  readonly sheet: CSSStyleSheet;
  readonly observer: MutationObserver;
}

/** The constructed stylesheets standing for one terminal's `<style>` elements. */
export class StyleMirror {
  private readonly mirrors = new Map<HTMLElement, Mirror>();

  /** Runs `open` (xterm's `open()`) with stand-ins, mirrored, for the `<style>` elements it creates; answers what it answers. */
  capture<T>(open: () => T): T {
    const doc = document;
    const original = Object.getOwnPropertyDescriptor(doc, "createElement");
    const create = doc.createElement.bind(doc) as (tag: string, options?: ElementCreationOptions) => HTMLElement;
    const patched = (tag: string, options?: ElementCreationOptions): HTMLElement => {
      if (tag.toLowerCase() !== "style") return create(tag, options);
      const el = create(STAND_IN);
      this.adopt(el);
      return el;
    };
    Object.defineProperty(doc, "createElement", { value: patched, configurable: true, writable: true });
    try {
      return open();
    } finally {
      if (original) Object.defineProperty(doc, "createElement", original);
      else delete (doc as { createElement?: unknown }).createElement;
    }
  }

  private adopt(el: HTMLElement): void {
    const sheet = new CSSStyleSheet();
    const sync = () => {
      try {
        sheet.replaceSync(el.textContent);
      } catch {
        // Not CSS this browser takes: the terminal renders unstyled, as without the mirror.
      }
    };
    const observer = new MutationObserver(sync);
    observer.observe(el, { childList: true, characterData: true, subtree: true });
    sync();
    this.mirrors.set(el, { sheet, observer });
    document.adoptedStyleSheets = [...document.adoptedStyleSheets, sheet];
  }

  dispose(): void {
    const sheets = new Set<CSSStyleSheet>();
    for (const { sheet, observer } of this.mirrors.values()) {
      observer.disconnect();
      sheets.add(sheet);
    }
    this.mirrors.clear();
    document.adoptedStyleSheets = document.adoptedStyleSheets.filter((s) => !sheets.has(s));
  }
}

interface RowFactory {
  _addStyle?: (el: HTMLElement, declarations: string) => void;
}

/**
 * Makes the DOM renderer's cell colours (24-bit, minimum contrast) go through
 * `element.style` instead of a style attribute. Reaches into xterm's private
 * renderer (checked shape; xterm is pinned by the lockfile): answers false
 * when the shape is not there, and then such cells show the default colour.
 */
export function styleCellsThroughCssom(term: Terminal): boolean {
  const core = (term as unknown as { _core?: { _renderService?: { _renderer?: { value?: { _rowFactory?: RowFactory } } } } })._core;
  const factory = core?._renderService?._renderer?.value?._rowFactory;
  if (!factory || typeof factory._addStyle !== "function") return false;
  factory._addStyle = (el, declarations) => {
    for (const decl of declarations.split(";")) {
      const at = decl.indexOf(":");
      if (at > 0) el.style.setProperty(decl.slice(0, at).trim(), decl.slice(at + 1).trim());
    }
  };
  return true;
}
