import type { Session } from "@paddock/contracts";

function creatorKey(workspaceId: string, creatorId: string): string {
  return `${workspaceId} ${creatorId}`;
}

/**
 * Secondary indexes over the sessions view, kept up to date by the view on
 * every change: how many records each workspace and each creator in it holds
 * (the create path's record limits) and which sessions are queued (what a placement pass looks
 * at). Without them both were a scan of every record, per create and per pass.
 */
export class SessionIndex {
  private readonly perWorkspace = new Map<string, number>();
  /** `<workspace> <creator>` → records (a space is in no Id). */
  private readonly perCreator = new Map<string, number>();
  private readonly queuedByKey = new Map<string, Session>();
  /** session id → its workspace (ids are unique across workspaces): a preview URL names a session by id alone. */
  private readonly workspaceById = new Map<string, string>();

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
  };

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

  /** The queued sessions, as the view holds them. */
  queued(): IterableIterator<Session> {
    return this.queuedByKey.values();
  }

  get queuedCount(): number {
    return this.queuedByKey.size;
  }
}
