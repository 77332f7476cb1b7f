/**
 * Where an attachment's output starts: how its `since` maps onto the app's
 * TERM log (everything, after a cursor, or a screen snapshot when asked for
 * or when the cursor's chunks are gone).
 */
import { Streams, type AttachQuery } from "@paddock/contracts";
import type { GatewayContext } from "../context.ts";
import { firstSeqOf } from "./termlog.ts";

export interface OutputStart {
  /** Start with a screen snapshot (then the chunks after it). */
  snapshot: boolean;
  /** The first sequence to deliver; undefined: the whole log (or after the snapshot). */
  startSeq: number | undefined;
}

/** Resolves since against the log filtered by termFilter; onTruncated is told where the log now begins when the cursor is gone. */
export async function outputStart(
  ctx: GatewayContext,
  since: AttachQuery["since"],
  termFilter: string,
  onTruncated: (from: number) => void,
): Promise<OutputStart> {
  if (since === "screen") return { snapshot: true, startSeq: undefined };
  if (since === "all") return { snapshot: false, startSeq: undefined };
  const cursor = Number(since);
  if (!(cursor > 0)) return { snapshot: false, startSeq: undefined };
  const first = await firstSeqOf(await ctx.jsm(), Streams.term, termFilter);
  if (first === undefined || first > cursor) {
    onTruncated(first ?? cursor + 1);
    return { snapshot: true, startSeq: undefined };
  }
  return { snapshot: false, startSeq: cursor + 1 };
}
