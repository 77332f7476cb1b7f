import { isTerminal, occupiesSlot, runnerKey, type Session } from "@paddock/contracts";
import { SessionOrder } from "./session-order.ts";

function creatorKey(workspaceId: string, creatorId: string): string {
  return `${workspaceId} ${creatorId}`;
}

/** The runner whose slot a record holds (placed, live, not cold), as a runnerKey. */
function slotOf(s: Session | undefined): string | undefined {
  return s?.poolId && s.runnerId && occupiesSlot(s.state) ? runnerKey(s.poolId, s.runnerId) : undefined;
}

/** `<workspace> <parent>` of a live child record. */
function parentOf(s: Session | undefined): string | undefined {
  return s?.parentId && !isTerminal(s.state) ? `${s.workspaceId} ${s.parentId}` : undefined;
}

function sameSlot(a: Session | undefined, b: Session | undefined): boolean {
  return a !== undefined && b !== undefined && a.poolId === b.poolId && a.runnerId === b.runnerId && occupiesSlot(a.state) === occupiesSlot(b.state);
}

function sameParent(a: Session | undefined, b: Session | undefined): boolean {
  return a !== undefined && b !== undefined && a.workspaceId === b.workspaceId && a.parentId === b.parentId && isTerminal(a.state) === isTerminal(b.state);
}

const NONE: ReadonlySet<string> = new Set();

/**
 * Secondary indexes over the sessions view, kept up to date by the view on
 * every change: how many records each workspace and each creator in it holds
 * (the create path's record limits), which sessions are queued (what a placement pass looks
 * at), which hold each runner's slots (capacity repair, a lost runner), each
 * session's live children (its end of life) and the listing order
 * (`session-order.ts`). Without them each was a scan of every record, per create, per
 * pass, per sweep, per ended session.
 */
export class SessionIndex {
  private readonly perWorkspace = new Map<string, number>();
  /** `<workspace> <creator>` → records (a space is in no Id). */
  private readonly perCreator = new Map<string, number>();
  private readonly queuedByKey = new Map<string, Session>();
  /** session id → its workspace (ids are unique across workspaces): a preview URL names a session by id alone. */
  private readonly workspaceById = new Map<string, string>();
  /** runnerKey → view keys of the records holding one of its slots. */
  private readonly placedByRunner = new Map<string, Set<string>>();
  /** `<workspace> <parent>` → view keys of its live children. */
  private readonly liveChildren = new Map<string, Set<string>>();
  /** The records in listing order (a page reads its rows, not every record). */
  readonly order = new SessionOrder();

  /** The view's onEntry hook. */
  readonly onEntry = (key: string, prev: Session | undefined, next: Session | undefined): void => {
    if (prev?.workspaceId !== next?.workspaceId) {
      if (prev) this.bump(this.perWorkspace, prev.workspaceId, -1);
      if (next) this.bump(this.perWorkspace, next.workspaceId, 1);
    }
    const before = prev ? creatorKey(prev.workspaceId, prev.creatorId) : undefined;
    const after = next ? creatorKey(next.workspaceId, next.creatorId) : undefined;
    if (before !== after) {
      if (before !== undefined) this.bump(this.perCreator, before, -1);
      if (after !== undefined) this.bump(this.perCreator, after, 1);
    }
    if (next) this.workspaceById.set(next.id, next.workspaceId);
    else if (prev) this.workspaceById.delete(prev.id);
    if (next?.state === "queued") this.queuedByKey.set(key, next);
    else this.queuedByKey.delete(key);
    // Keys are built only when a record's runner slot or parent link may have changed (not on every revision).
    if (!sameSlot(prev, next)) this.move(this.placedByRunner, key, slotOf(prev), slotOf(next));
    if (!sameParent(prev, next)) this.move(this.liveChildren, key, parentOf(prev), parentOf(next));
    this.order.onEntry(key, prev, next);
  };

  private move(groups: Map<string, Set<string>>, key: string, from: string | undefined, to: string | undefined): void {
    if (from === to) return;
    if (from !== undefined) {
      const group = groups.get(from);
      group?.delete(key);
      if (group?.size === 0) groups.delete(from);
    }
    if (to !== undefined) {
      const group = groups.get(to);
      if (group) group.add(key);
      else groups.set(to, new Set([key]));
    }
  }

  private bump(counts: Map<string, number>, key: string, by: number): void {
    const n = (counts.get(key) ?? 0) + by;
    if (n > 0) counts.set(key, n);
    else counts.delete(key);
  }

  /** Records of the workspace in the view (any state). */
  countIn(workspaceId: string): number {
    return this.perWorkspace.get(workspaceId) ?? 0;
  }

  /** Records one creator holds in the workspace (any state). */
  countOf(workspaceId: string, creatorId: string): number {
    return this.perCreator.get(creatorKey(workspaceId, creatorId)) ?? 0;
  }

  /** The workspace of a session in the view. */
  workspaceOf(sessionId: string): string | undefined {
    return this.workspaceById.get(sessionId);
  }

  /** View keys of the records holding a slot of the runner (its capacity as the records say). */
  placedOn(poolId: string, runnerId: string): ReadonlySet<string> {
    return this.placedByRunner.get(runnerKey(poolId, runnerId)) ?? NONE;
  }

  /** View keys of a session's live children. */
  childrenOf(workspaceId: string, parentId: string): ReadonlySet<string> {
    return this.liveChildren.get(`${workspaceId} ${parentId}`) ?? NONE;
  }

  /** The queued sessions, as the view holds them. */
  queued(): IterableIterator<Session> {
    return this.queuedByKey.values();
  }

  get queuedCount(): number {
    return this.queuedByKey.size;
  }
}
