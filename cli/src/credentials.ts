import { chmodSync, mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { z } from "zod";
import { Actor, EpochMs, Id, TokenValue } from "@paddock/contracts";
import type { CliEnv } from "./io.ts";

/*
 * Where `paddock login` keeps the token it got by single sign-on: one 0600
 * file, `credentials.json` in $PADDOCK_CONFIG_DIR (else
 * $XDG_CONFIG_HOME/paddock, else ~/.config/paddock), one token per gateway
 * URL. Read only when neither --token nor $PADDOCK_TOKEN gives one, and only
 * while it has not expired.
 */

export const StoredToken = z.object({ token: TokenValue, id: Id, workspaceId: Id, actor: Actor, expiresAt: EpochMs }).strict();
export type StoredToken = z.infer<typeof StoredToken>;
const CredentialsFile = z.object({ gateways: z.record(z.string(), StoredToken) }).strict();

/** The directory of the CLI's own files; undefined when the environment names none (no home). */
export function configDirOf(env: CliEnv): string | undefined {
  const nonEmpty = (v: string | undefined) => (v === undefined || v === "" ? undefined : v);
  const explicit = nonEmpty(env.PADDOCK_CONFIG_DIR);
  if (explicit !== undefined) return explicit;
  const xdg = nonEmpty(env.XDG_CONFIG_HOME);
  if (xdg !== undefined) return join(xdg, "paddock");
  const home = nonEmpty(env.HOME);
  return home === undefined ? undefined : join(home, ".config", "paddock");
}

function read(dir: string): Record<string, StoredToken> {
  try {
    const parsed = CredentialsFile.safeParse(JSON.parse(readFileSync(join(dir, "credentials.json"), "utf8")));
    return parsed.success ? parsed.data.gateways : {};
  } catch {
    return {}; // none yet, or unreadable: as if logged out
  }
}

/** The stored token of a gateway, unless it has expired. */
export function storedToken(dir: string | undefined, url: string, now: number): StoredToken | undefined {
  if (dir === undefined) return undefined;
  const stored = read(dir)[url];
  return stored && stored.expiresAt > now ? stored : undefined;
}

/** Stores a gateway's token (replacing the one before): written to a 0600 file beside, then renamed over. */
export function saveToken(dir: string, url: string, token: StoredToken): string {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const file = join(dir, "credentials.json");
  const tmp = `${file}.${process.pid}.tmp`;
  writeFileSync(tmp, `${JSON.stringify({ gateways: { ...read(dir), [url]: token } }, null, 2)}\n`, { mode: 0o600 });
  chmodSync(tmp, 0o600);
  renameSync(tmp, file);
  return file;
}
