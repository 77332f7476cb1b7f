/**
 * Where each caller last found a session held (decision 0068): a file call
 * of the same caller on the same session asks that runner beside its own
 * authorization instead of after it. The early answer is used only when the
 * session, read and authorized, is still that placement; it is only ever an
 * offer or bytes held in the gateway, so nothing reaches the client, and
 * nothing is done to the session, before the call is authorized. A wrong
 * hint costs one runner request more.
 */
import { ConflictError, type Session } from "@paddock/contracts";

export interface Placement {
  sessionId: string;
  workspaceId: string;
  placementGeneration: number;
  poolId: string;
  runnerId: string;
}

/** Where session is held (a live sandbox on a runner), or undefined. */
export function placementOf(session: Session): Placement | undefined {
  const { poolId, runnerId } = session;
  if (poolId === undefined || runnerId === undefined || (session.state !== "running" && session.state !== "suspended_warm")) return undefined;
  return { sessionId: session.id, workspaceId: session.workspaceId, placementGeneration: session.placementGeneration, poolId, runnerId };
}

/** Where a session is held; conflict when it has no live sandbox to act on (every sandbox call's check). */
export function heldPlacement(session: Session): Placement {
  const placement = placementOf(session);
  if (!placement) throw new ConflictError(`session is ${session.state}: it has no live sandbox`);
  return placement;
}

/** Hints kept (the least recently found go first). */
const MAX_HINTS = 10_000;

export class PlacementHints {
  private readonly hints = new Map<string, Placement>();

  constructor(private readonly max = MAX_HINTS) {}

  /** The placement caller (its token's hash) last found sessionId at, if any. */
  get(tokenHash: string, sessionId: string): Placement | undefined {
    return this.hints.get(`${tokenHash}/${sessionId}`);
  }

  /** Remembers where caller found session, authorized; forgets it when the session is held nowhere. */
  remember(tokenHash: string, session: Session): void {
    const key = `${tokenHash}/${session.id}`;
    this.hints.delete(key);
    const placement = placementOf(session);
    if (!placement) return;
    if (this.hints.size >= this.max) this.hints.delete(this.hints.keys().next().value as string);
    this.hints.set(key, placement);
  }

  /** Whether session is still held where hint says. */
  static holds(hint: Placement, session: Session): boolean {
    return hint.poolId === session.poolId && hint.runnerId === session.runnerId && hint.placementGeneration === session.placementGeneration;
  }
}
