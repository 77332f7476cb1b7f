/**
 * Hash routes (`#/sessions`, `#/sessions/:id`, ...): the console is one
 * static page, and the fragment never reaches the server. A page mounts into
 * the main element and answers how to unmount (streams closed, terminals
 * disposed) when the route changes.
 */
export type Unmount = () => void;
export type Page = (root: HTMLElement, params: Record<string, string>) => Unmount | void;

interface RouteEntry {
  pattern: RegExp;
  names: string[];
  page: Page;
}

export class Router {
  private readonly routes: RouteEntry[] = [];
  private unmount: Unmount | undefined;

  constructor(
    private readonly root: HTMLElement,
    private readonly notFound: Page,
  ) {}

  /** `/sessions/:id` style patterns; each `:name` is one segment. */
  add(path: string, page: Page): this {
    const names: string[] = [];
    const pattern = new RegExp(`^${path.replace(/:([a-zA-Z]+)/g, (_, n: string) => (names.push(n), "([^/]+)"))}$`);
    this.routes.push({ pattern, names, page });
    return this;
  }

  start(): void {
    window.addEventListener("hashchange", () => this.render());
    this.render();
  }

  render(): void {
    this.unmount?.();
    this.unmount = undefined;
    while (this.root.firstChild) this.root.removeChild(this.root.firstChild);
    const path = location.hash.replace(/^#/, "") || "/sessions";
    for (const r of this.routes) {
      const m = r.pattern.exec(path);
      if (!m) continue;
      const params = Object.fromEntries(r.names.map((n, i) => [n, decodeURIComponent(m[i + 1] ?? "")]));
      this.unmount = r.page(this.root, params) ?? undefined;
      return;
    }
    this.unmount = this.notFound(this.root, {}) ?? undefined;
  }
}
