/**
 * Where a snapshot request stands, read from the session record alone: the
 * scheduler answers `POST …/snapshot` with it, and the gateway's
 * `GET …/snapshots/:requestId` waits on it. A snapshot of a large workspace
 * can outlast any one call; its outcome stays on the record (`snapshot`,
 * `refusal`), so a caller that was told "pending" learns it later.
 */
import { isTerminal, type Checkpoint, type Session } from "./session.ts";

export const SnapshotStatus = { taken: "taken", pending: "pending", refused: "refused", ended: "ended", unknown: "unknown" } as const;

export type SnapshotOutcome =
  | { status: typeof SnapshotStatus.taken; checkpoint: Checkpoint }
  | { status: typeof SnapshotStatus.pending }
  | { status: typeof SnapshotStatus.refused; reason: string }
  | { status: typeof SnapshotStatus.ended; state: Session["state"] }
  /** Never asked of this session, or given up on (the runner did not confirm it within the pending timeout). */
  | { status: typeof SnapshotStatus.unknown };

export function snapshotOutcome(s: Session, requestId: string): SnapshotOutcome {
  if (s.snapshot?.requestId === requestId) return { status: SnapshotStatus.taken, checkpoint: s.snapshot.checkpoint };
  if (s.pending?.requestId === requestId) return { status: SnapshotStatus.pending };
  if (s.refusal?.requestId === requestId) return { status: SnapshotStatus.refused, reason: s.refusal.reason };
  if (isTerminal(s.state)) return { status: SnapshotStatus.ended, state: s.state };
  return { status: SnapshotStatus.unknown };
}
