// The secrets `npm run up` keeps in its data dir (mode 0711: a bwrap runner's
// sessions, each its own uid, pass through it to bind their directories, but
// cannot list it; and their sandboxes hide it): the dev token,
// the session-token and secrets keys, and one NATS credentials file per
// principal (mode 0600, read by the services through PADDOCK_NATS_CREDS_FILE).
// Kept across restarts, so the dev token, sessions' tokens, sealed secrets and
// observers' credentials stay valid.
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { readNatsCredentials, type NatsCredentialsFile } from "@paddock/config";

/**
 * Creates the data dir (or tightens an existing one) so only this user reads
 * the store, logs and secrets: the dir itself passable, not listable (0711),
 * everything in it private (0700 dirs, 0600 files).
 */
export function privateDataDir(dataDir: string): void {
  for (const dir of ["logs", "nats"]) {
    mkdirSync(join(dataDir, dir), { recursive: true, mode: 0o700 });
    chmodSync(join(dataDir, dir), 0o700);
  }
  chmodSync(dataDir, 0o711);
}

/** A random secret stored in `<dataDir>/<name>` (0600), generated once. */
export function persistedSecret(dataDir: string, name: string, opts: { prefix?: string; bytes?: number } = {}): string {
  const file = join(dataDir, name);
  if (existsSync(file)) return readFileSync(file, "utf8").trim();
  const secret = `${opts.prefix ?? ""}${randomBytes(opts.bytes ?? 24).toString("hex")}`;
  writeFileSync(file, secret + "\n", { mode: 0o600 });
  return secret;
}

export interface UpCredentials {
  /** user → password, for the nats-server config. */
  passwords: Record<string, string>;
  /** user → its credentials file. */
  files: Record<string, string>;
}

/** The credentials file of each user under `<dataDir>/creds/` (0700), made once and reused. */
export function upCredentials(dataDir: string, users: readonly string[]): UpCredentials {
  const dir = join(dataDir, "creds");
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  chmodSync(dir, 0o700);
  const passwords: Record<string, string> = {};
  const files: Record<string, string> = {};
  for (const user of users) {
    const file = join(dir, `${user}.json`);
    if (!existsSync(file)) {
      const creds: NatsCredentialsFile = { user, password: randomBytes(24).toString("hex") };
      writeFileSync(file, JSON.stringify(creds) + "\n", { mode: 0o600 });
    }
    // The same check the services make: a file others may read is refused, not used.
    passwords[user] = readNatsCredentials(file).password;
    files[user] = file;
  }
  return { passwords, files };
}
