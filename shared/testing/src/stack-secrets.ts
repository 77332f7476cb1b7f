// Secrets of a test stack as `npm run up` keeps them (scripts/up-secrets.ts):
// 0600 files in the stack's data dir, read by the services through
// `<NAME>_FILE` and PADDOCK_NATS_CREDS_FILE, never through their environment.
import { mkdirSync, writeFileSync } from "node:fs";
import { randomBytes } from "node:crypto";
import { join } from "node:path";

export interface StackSecretFiles {
  devToken: string;
  sessionTokenSecret: string;
  secretsKey: string;
  /** NATS user → its credentials file (with `isolated`). */
  creds: Record<string, string>;
}

/** Writes the dev token, the session-token secret, a secrets key and one credentials file per NATS user. */
export function writeStackSecretFiles(dataDir: string, token: string, passwords: Record<string, string>): StackSecretFiles {
  const file = (name: string, text: string) => {
    const path = join(dataDir, name);
    writeFileSync(path, text + "\n", { mode: 0o600 });
    return path;
  };
  mkdirSync(join(dataDir, "creds"), { mode: 0o700 });
  const creds = Object.fromEntries(Object.entries(passwords).map(([user, password]) => [user, file(join("creds", `${user}.json`), JSON.stringify({ user, password }))]));
  return {
    devToken: file("dev-token", token),
    sessionTokenSecret: file("session-token-secret", randomBytes(24).toString("hex")),
    secretsKey: file("secrets-key", randomBytes(32).toString("hex")),
    creds,
  };
}
