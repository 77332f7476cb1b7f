import type { Session } from "@paddock/contracts";

/**
 * Secondary indexes over the sessions view, kept up to date by the view on
 * every change: how many records each workspace holds (the create path's
 * record limit) and which sessions are queued (what a placement pass looks
 * at). Without them both were a scan of every record, per create and per pass.
 */
export class SessionIndex {
  private readonly perWorkspace = new Map<string, number>();
  private readonly queuedByKey = new Map<string, Session>();

  /** The view's onEntry hook. */
  readonly onEntry = (key: string, prev: Session | undefined, next: Session | undefined): void => {
    if (prev?.workspaceId !== next?.workspaceId) {
      if (prev) this.bump(prev.workspaceId, -1);
      if (next) this.bump(next.workspaceId, 1);
    }
    if (next?.state === "queued") this.queuedByKey.set(key, next);
    else this.queuedByKey.delete(key);
  };

  private bump(workspaceId: string, by: number): void {
    const n = (this.perWorkspace.get(workspaceId) ?? 0) + by;
    if (n > 0) this.perWorkspace.set(workspaceId, n);
    else this.perWorkspace.delete(workspaceId);
  }

  /** Records of the workspace in the view (any state). */
  countIn(workspaceId: string): number {
    return this.perWorkspace.get(workspaceId) ?? 0;
  }

  /** The queued sessions, as the view holds them. */
  queued(): IterableIterator<Session> {
    return this.queuedByKey.values();
  }

  get queuedCount(): number {
    return this.queuedByKey.size;
  }
}
