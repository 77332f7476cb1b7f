import { isTerminal, type Session } from "@paddock/contracts";

/** A session's place in a listing: (createdAt, id), neither of which ever changes. */
export interface OrderRow {
  readonly createdAt: number;
  readonly id: string;
  /** The sessions view's key of the record. */
  readonly key: string;
}

/** Where a page starts: after this (createdAt, id). */
export type OrderCursor = readonly [createdAt: number, id: string];

function compare(a: OrderCursor, b: OrderCursor): number {
  return a[0] - b[0] || (a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0);
}

function cursorOf(row: OrderRow): OrderCursor {
  return [row.createdAt, row.id];
}

/**
 * Rows sorted by (createdAt, id). Records arrive nearly in creation order, so
 * an insert is an append; a removal shifts the tail (a memmove of at most one
 * workspace's rows, cheaper than any tree at these sizes).
 */
class SortedRows {
  readonly rows: OrderRow[] = [];

  /** The index of the first row after `cursor` (every row when none). */
  firstAfter(cursor: OrderCursor | undefined): number {
    if (cursor === undefined) return 0;
    let lo = 0;
    let hi = this.rows.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (compare(cursorOf(this.rows[mid] as OrderRow), cursor) <= 0) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  insert(row: OrderRow): void {
    const last = this.rows[this.rows.length - 1];
    if (last === undefined || compare(cursorOf(last), cursorOf(row)) < 0) {
      this.rows.push(row);
      return;
    }
    const at = this.firstAfter(cursorOf(row));
    if (this.rows[at - 1]?.id === row.id) return;
    this.rows.splice(at, 0, row);
  }

  remove(row: OrderRow): void {
    const at = this.firstAfter(cursorOf(row)) - 1;
    if (this.rows[at]?.id === row.id) this.rows.splice(at, 1);
  }
}

/** The lists a record is on: its workspace's and its creator's, each in full and live only. */
function listsOf(s: Session): string[] {
  const all = [`a ${s.workspaceId}`, `a ${s.workspaceId} ${s.creatorId}`];
  return isTerminal(s.state) ? all : [...all, `l ${s.workspaceId}`, `l ${s.workspaceId} ${s.creatorId}`];
}

/**
 * The sessions view in listing order, per workspace and per creator in it,
 * each also without terminal records, so a page of a workspace of 100,000
 * records reads the page's rows, not every record (and sorts nothing).
 * Kept by the sessions view's onEntry hook (see session-index.ts).
 */
export class SessionOrder {
  private readonly lists = new Map<string, SortedRows>();
  private readonly rowByKey = new Map<string, OrderRow>();

  onEntry(key: string, prev: Session | undefined, next: Session | undefined): void {
    // Most revisions keep a record on the lists it is on: decided without building their names.
    if (prev && next && prev.workspaceId === next.workspaceId && prev.creatorId === next.creatorId && isTerminal(prev.state) === isTerminal(next.state)) return;
    const before = prev ? listsOf(prev) : [];
    const after = next ? listsOf(next) : [];
    const row = this.rowFor(key, prev ?? next);
    if (!row) return;
    for (const list of before) if (!after.includes(list)) this.leave(list, row);
    for (const list of after) if (!before.includes(list)) this.join(list, row);
    if (!next) this.rowByKey.delete(key);
  }

  /**
   * The view keys of a workspace's records (or one creator's in it) in
   * (createdAt, id) order after `cursor`, live ones only unless told.
   */
  *keys(q: { workspaceId: string; creatorId?: string | undefined; includeTerminal: boolean; after?: OrderCursor | undefined }): Generator<string> {
    const name = `${q.includeTerminal ? "a" : "l"} ${q.workspaceId}${q.creatorId === undefined ? "" : ` ${q.creatorId}`}`;
    const list = this.lists.get(name);
    if (!list) return;
    const rows = list.rows;
    for (let i = list.firstAfter(q.after); i < rows.length; i++) yield (rows[i] as OrderRow).key;
  }

  private rowFor(key: string, s: Session | undefined): OrderRow | undefined {
    const held = this.rowByKey.get(key);
    if (held || !s) return held;
    const row: OrderRow = { createdAt: s.createdAt, id: s.id, key };
    this.rowByKey.set(key, row);
    return row;
  }

  private join(name: string, row: OrderRow): void {
    let list = this.lists.get(name);
    if (!list) this.lists.set(name, (list = new SortedRows()));
    list.insert(row);
  }

  private leave(name: string, row: OrderRow): void {
    const list = this.lists.get(name);
    if (!list) return;
    list.remove(row);
    if (list.rows.length === 0) this.lists.delete(name);
  }
}
