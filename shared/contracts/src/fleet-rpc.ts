/**
 * Runner → scheduler request/reply calls (besides registration). All are
 * answered from the session record, the authority on who holds a session.
 */
import { z } from "zod";
import type { Rpc } from "./rpc.ts";
import { SecretName } from "./environment.ts";
import { Generation, Id } from "./ids.ts";
import { Subjects } from "./names.ts";
import { HeldSession } from "./fleet.ts";

/** Sessions one held check names at most (a runner with more asks in several). */
export const HELD_CHECK_MAX_SESSIONS = 500;

/** One placement of a session as a runner names it. */
const PlacementRef = {
  poolId: Id,
  runnerId: Id,
  workspaceId: Id,
  sessionId: Id,
  placementGeneration: Generation.min(1),
};

/**
 * "Is this still the session's current placement?" — asked by a terminal-log
 * writer whose append was refused because another runner's subject holds the
 * app's last chunk: a predecessor's late write (step over it) or a
 * successor's (latch shut). Answers only a boolean about the asker's own
 * placement, so nothing about other runners is disclosed.
 */
export const PlacementCheckRequest = z.object(PlacementRef).strict();
export type PlacementCheckRequest = z.infer<typeof PlacementCheckRequest>;

export const PlacementCheckReply = z
  .object({
    /** True while the record places the session on this runner at this generation. */
    current: z.boolean(),
  })
  .strict();
export type PlacementCheckReply = z.infer<typeof PlacementCheckReply>;

/**
 * The secrets a runner needs to boot a session it holds: the envelopes of
 * its environment's references and, asked with `token`, the placement's
 * service token (injected as PADDOCK_TOKEN; never put in DISPATCH, a stream
 * others may read). The scheduler answers only when the record places the
 * session on that runner at that generation, only names the session's
 * environment references, and (with per-principal NATS credentials) only to
 * that runner's own inbox.
 */
export const SessionSecretsRequest = z
  .object({ ...PlacementRef, names: z.array(SecretName).max(128), token: z.boolean().optional() })
  .strict();
export type SessionSecretsRequest = z.infer<typeof SessionSecretsRequest>;

export const SessionSecretsReply = z
  .object({
    secrets: z
      .array(
        z
          .object({
            name: SecretName,
            /** The stored envelope (sealed with PADDOCK_SECRETS_KEY when one is configured), base64; absent when not set. */
            envelope: z.string().max(128 * 1024).optional(),
          })
          .strict(),
      )
      .max(128),
    /** The placement's service token, when asked for. A secret: never logged. */
    sessionToken: z.string().min(16).max(256).optional(),
  })
  .strict();
export type SessionSecretsReply = z.infer<typeof SessionSecretsReply>;

/**
 * "Which of these do I hold for nothing?" — a runner's periodic check of the
 * sessions it has held for a while. The scheduler's teardown is sent after
 * the write that ends a session, so it can be lost (a scheduler killed in
 * between, a publish that failed in a broker failover) and the sandbox would
 * live on. Answered only about the asker's own placements.
 */
export const HeldCheckRequest = z
  .object({
    poolId: Id,
    runnerId: Id,
    /** The asker's registration generation: a superseded runner is refused (it re-registers instead). */
    runnerGeneration: Generation.min(1),
    sessions: z.array(HeldSession).max(HELD_CHECK_MAX_SESSIONS),
  })
  .strict();
export type HeldCheckRequest = z.infer<typeof HeldCheckRequest>;

export const HeldCheckReply = z
  .object({
    /** Held placements whose record ended there (destroyed, failed, canceled) or is gone: tear them down. */
    ended: z.array(HeldSession).max(HELD_CHECK_MAX_SESSIONS),
  })
  .strict();
export type HeldCheckReply = z.infer<typeof HeldCheckReply>;

export const FleetRpc = {
  placementCheck: { subject: Subjects.placementCheck, request: PlacementCheckRequest, result: PlacementCheckReply },
  sessionSecrets: { subject: Subjects.secrets, request: SessionSecretsRequest, result: SessionSecretsReply },
  heldCheck: { subject: Subjects.heldCheck, request: HeldCheckRequest, result: HeldCheckReply },
} as const satisfies Record<string, Rpc<z.ZodType, z.ZodType>>;
