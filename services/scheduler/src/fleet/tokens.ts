import { createHmac, randomBytes } from "node:crypto";
import { TokenRecord, type Session } from "@paddock/contracts";
import { tokenKey } from "@paddock/contracts/token-key";
import { encoderOf } from "@paddock/bus";
import type { SchedulerContext } from "../context.ts";

/** A per-process key when none is configured: tokens then only survive this replica. */
const ephemeralSecret = randomBytes(32).toString("hex");

/**
 * A session's service token for one placement: derived, not stored, so any
 * replica can re-dispatch the same token and revoke it without keeping it.
 */
export function sessionTokenOf(ctx: Pick<SchedulerContext, "config">, s: Pick<Session, "id">, placementGeneration: number): string {
  const mac = createHmac("sha256", ctx.config.sessionTokenSecret ?? ephemeralSecret)
    .update(`${s.id}.${placementGeneration}`)
    .digest("base64url");
  return `pdk_ses_${mac}`;
}

/** Stores the token's record (hashed key) so the gateway accepts it as the session's principal. */
export async function mintSessionToken(ctx: SchedulerContext, s: Session): Promise<string> {
  const token = sessionTokenOf(ctx, s, s.placementGeneration);
  const record: TokenRecord = {
    workspaceId: s.workspaceId,
    actor: { id: s.id, kind: "service" },
    sessionId: s.id,
    label: "session service token",
    createdAt: ctx.now(),
  };
  await ctx.tokens.put(tokenKey(token), encoderOf(ctx.nc)(TokenRecord, record));
  return token;
}
