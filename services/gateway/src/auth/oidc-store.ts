import { randomBytes } from "node:crypto";
import type { KV } from "@nats-io/kv";
import { z } from "zod";
import { decodeJson, encodeJson, isWrongLastSequence } from "@paddock/bus";
import { Actor, EpochMs, HANDOFF_PREFIX, Id, ReturnToPath } from "@paddock/contracts";
import { hashToken } from "./auth.ts";
import { SignInRefusedError, SignInStateError } from "./oidc.ts";

/*
 * KV `oidc` (every entry expires with the bucket's TTL, used or not), keys
 * by the sha256 of the secret they stand for, so neither a state, a handoff
 * code nor an ID token is ever stored:
 *   login.<sha256(state)>      PendingLogin, spent by its callback
 *   handoff.<sha256(code)>     Handoff, spent by its redeem
 *   idtoken.<sha256(id token)> the time it was exchanged: an ID token mints once
 * Any gateway replica answers any step: nothing is held in memory.
 */

/** How long a started login waits for its callback. */
export const LOGIN_TTL_MS = 10 * 60_000;

/** A login started by GET /v1/auth/oidc/login, waiting for its callback. */
export const PendingLogin = z
  .object({
    nonce: z.string().min(1).max(256),
    verifier: z.string().min(43).max(128),
    redirectUri: z.string().url(),
    /** sha256 of the random value of the browser cookie set at the start: the callback must come from that browser (no login CSRF). */
    binderHash: z.string().regex(/^[0-9a-f]{64}$/),
    workspaceId: Id.optional(),
    returnTo: ReturnToPath,
    expiresAt: EpochMs,
  })
  .strict();
export type PendingLogin = z.infer<typeof PendingLogin>;

/** A signed-in person waiting for the console to redeem their token (minted at redeem, so no token value is ever stored). */
export const Handoff = z.object({ workspaceId: Id, actor: Actor, expiresAt: EpochMs }).strict();
export type Handoff = z.infer<typeof Handoff>;

const SpentIdToken = z.object({ at: EpochMs }).strict();

const loginKey = (state: string) => `login.${hashToken(state)}`;
const handoffKey = (code: string) => `handoff.${hashToken(code)}`;
const idTokenKey = (idToken: string) => `idtoken.${hashToken(idToken)}`;

export class OidcStore {
  constructor(
    private readonly kv: () => Promise<KV>,
    private readonly now: () => number,
  ) {}

  async putLogin(state: string, login: PendingLogin): Promise<void> {
    await (await this.kv()).create(loginKey(state), encodeJson(PendingLogin, login));
  }

  /** The login a callback's state names, deleted by this one use (a replayed, unknown or expired state is refused). */
  async spendLogin(state: string): Promise<PendingLogin> {
    const login = await this.spend(loginKey(state), PendingLogin);
    if (!login || login.expiresAt <= this.now()) throw new SignInStateError();
    return login;
  }

  /** A fresh one-time code for the console, stored under its hash. */
  async putHandoff(handoff: Handoff): Promise<string> {
    const code = HANDOFF_PREFIX + randomBytes(32).toString("base64url");
    await (await this.kv()).create(handoffKey(code), encodeJson(Handoff, handoff));
    return code;
  }

  async spendHandoff(code: string): Promise<Handoff> {
    const handoff = await this.spend(handoffKey(code), Handoff);
    if (!handoff || handoff.expiresAt <= this.now()) throw new SignInRefusedError("the handoff code is unknown, expired or already used");
    return handoff;
  }

  /** Records an ID token's one exchange; a second one (any replica) is refused. */
  async spendIdToken(idToken: string): Promise<void> {
    try {
      await (await this.kv()).create(idTokenKey(idToken), encodeJson(SpentIdToken, { at: this.now() }));
    } catch (err) {
      if (isWrongLastSequence(err)) throw new SignInRefusedError("this ID token was already exchanged");
      throw err;
    }
  }

  /** Reads and deletes a record by a CAS on its revision: of two concurrent uses one wins; undefined when absent or lost. */
  private async spend<S extends z.ZodType>(key: string, schema: S): Promise<z.infer<S> | undefined> {
    const kv = await this.kv();
    const entry = await kv.get(key);
    const decoded = entry?.operation === "PUT" ? decodeJson(schema, entry.value) : undefined;
    if (!entry || !decoded?.ok) return undefined;
    try {
      await kv.purge(key, { previousSeq: entry.revision });
    } catch {
      return undefined; // another use won the race
    }
    return decoded.value;
  }
}
