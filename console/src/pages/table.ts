/**
 * A sortable table kept current in place: rows are keyed by id, and a cell
 * is rebuilt only when its text changed (its buttons only when the row's
 * signature did), so a live refresh never steals the focus from a row's
 * button or closes its confirm step.
 */
import { h, replace, type Child } from "../dom.ts";

export interface Column<T> {
  readonly key: string;
  readonly label: string;
  /** What the column sorts by (and what tells a row changed). */
  readonly value: (row: T) => string | number;
  /** How the cell shows; the value as text when absent. */
  readonly render?: (row: T) => Child;
  readonly sortable?: boolean;
}

export type SortDir = "ascending" | "descending";
export interface SortState {
  readonly key: string;
  readonly dir: SortDir;
}

/** The rows ordered by one column (numbers as numbers, text by locale); stable for equal values. */
export function sortRows<T>(rows: readonly T[], columns: readonly Column<T>[], sort: SortState | undefined): T[] {
  const col = sort && columns.find((c) => c.key === sort.key);
  if (!sort || !col) return [...rows];
  const sign = sort.dir === "ascending" ? 1 : -1;
  return rows
    .map((row, i) => ({ row, i, v: col.value(row) }))
    .sort((a, b) => {
      const c = typeof a.v === "number" && typeof b.v === "number" ? a.v - b.v : String(a.v).localeCompare(String(b.v));
      return c !== 0 ? sign * c : a.i - b.i;
    })
    .map((x) => x.row);
}

/** The next sort when a column's header is pressed: that column ascending, or the other way round. */
export function nextSort(current: SortState | undefined, key: string): SortState {
  return current?.key === key && current.dir === "ascending" ? { key, dir: "descending" } : { key, dir: "ascending" };
}

export interface TableOptions<T> {
  readonly columns: readonly Column<T>[];
  readonly id: (row: T) => string;
  /** data-testid of the table, and of each row. */
  readonly testid: string;
  readonly rowTestid: string;
  readonly caption: string;
  readonly empty: string;
  readonly sort?: SortState;
  /** The last cell of each row (buttons). */
  readonly actions?: (row: T) => Child;
  /** What the buttons depend on (state, name): they are rebuilt only when it changes, so focus stays put. */
  readonly signature?: (row: T) => string;
}

export interface Table<T> {
  readonly el: HTMLElement;
  update(rows: readonly T[]): void;
}

export function table<T>(opts: TableOptions<T>): Table<T> {
  let sort = opts.sort;
  let rows: readonly T[] = [];
  const built = new Map<string, { sig: string; tr: HTMLTableRowElement; cells: HTMLTableCellElement[]; actions: HTMLTableCellElement | undefined }>();
  const tbody = h("tbody");
  const head = h("tr");
  const colCount = opts.columns.length + (opts.actions ? 1 : 0);
  const el = h("table", { "data-testid": opts.testid }, h("caption", { class: "visually-hidden" }, opts.caption), h("thead", {}, head), tbody);

  const renderHead = () => {
    replace(
      head,
      ...opts.columns.map((c) => {
        const dir = sort?.key === c.key ? sort.dir : undefined;
        const th = h("th", { scope: "col", "aria-sort": dir ?? (c.sortable === false ? undefined : "none") });
        if (c.sortable === false) th.append(c.label);
        else
          th.append(
            h(
              "button",
              { type: "button", class: "sort", "data-sort": c.key, onclick: () => ((sort = nextSort(sort, c.key)), renderHead(), render()) },
              c.label,
              h("span", { "aria-hidden": "true" }, dir === "ascending" ? " ▲" : dir === "descending" ? " ▼" : ""),
            ),
          );
        return th;
      }),
      opts.actions ? h("th", { scope: "col" }, h("span", { class: "visually-hidden" }, "Actions")) : null,
    );
  };

  const cellOf = (c: Column<T>, row: T) => h("td", { "data-col": c.key }, c.render ? c.render(row) : String(c.value(row)));
  const actionsOf = (row: T) => (opts.actions ? h("td", { class: "actions" }, opts.actions(row)) : undefined);

  const render = () => {
    const ordered = sortRows(rows, opts.columns, sort);
    const seen = new Set<string>();
    const trs: HTMLTableRowElement[] = [];
    for (const row of ordered) {
      const id = opts.id(row);
      seen.add(id);
      const sig = opts.signature?.(row) ?? "";
      const entry = built.get(id);
      if (!entry) {
        const cells = opts.columns.map((c) => cellOf(c, row));
        const actions = actionsOf(row);
        const tr = h("tr", { "data-testid": opts.rowTestid, "data-id": id }, ...cells, actions);
        built.set(id, { sig, tr, cells, actions });
        trs.push(tr);
        continue;
      }
      // Only what changed is rebuilt: a cell whose text moved, the buttons when the signature did.
      opts.columns.forEach((c, i) => {
        const old = entry.cells[i];
        const next = cellOf(c, row);
        if (old && old.textContent !== next.textContent) {
          old.replaceWith(next);
          entry.cells[i] = next;
        }
      });
      if (entry.sig !== sig) {
        const next = actionsOf(row);
        if (entry.actions && next) entry.actions.replaceWith(next);
        entry.actions = next;
        entry.sig = sig;
      }
      trs.push(entry.tr);
    }
    for (const [id, entry] of built)
      if (!seen.has(id)) {
        entry.tr.remove();
        built.delete(id);
      }
    // Move only rows out of place: moving a node would take the focus from it.
    let cursor: ChildNode | null = tbody.firstChild;
    for (const tr of trs) {
      if (cursor === tr) cursor = tr.nextSibling;
      else tbody.insertBefore(tr, cursor);
    }
    while (cursor) {
      const next: ChildNode | null = cursor.nextSibling;
      cursor.remove();
      cursor = next;
    }
    if (trs.length === 0) tbody.append(h("tr", { class: "empty" }, h("td", { colspan: colCount }, opts.empty)));
  };

  renderHead();
  render();
  return {
    el,
    update(next) {
      rows = next;
      render();
    },
  };
}
