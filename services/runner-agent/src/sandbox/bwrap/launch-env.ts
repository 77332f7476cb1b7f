/**
 * A session's environment on its way to bwrap (launch.ts `envFrom`): written
 * to a file in memory (/dev/shm, a tmpfs), 0600, under a random name that is
 * unlinked as soon as it is written. The runner keeps the only descriptor;
 * the chain's head opens the same file again through /proc/<runner>/fd/<n>,
 * which only the runner's own user (or root) may. The environment holds the
 * session's secrets and token: never in an argv, a path name, or on disk.
 */
import { randomUUID } from "node:crypto";
import { closeSync, openSync, unlinkSync, writeSync } from "node:fs";
import { join } from "node:path";
import { envArgs } from "./launch.ts";

/** Memory, not disk; present wherever glibc's POSIX shared memory is. */
const ENV_FILE_DIR = "/dev/shm";

export interface EnvFile {
  /** For launch.ts's `envFrom`. */
  readonly path: string;
  /** Frees it; once the chain's head opened it (the app or script ended, or never started). Idempotent. */
  close(): void;
}

export function openEnvFile(env: Record<string, string>): EnvFile {
  const name = join(ENV_FILE_DIR, `paddock-env-${randomUUID()}`);
  // O_EXCL: a name someone else made first is never written to (a link they planted, say).
  const fd = openSync(name, "wx+", 0o600);
  try {
    unlinkSync(name);
    const bytes = envArgs(env);
    for (let at = 0; at < bytes.length; ) at += writeSync(fd, bytes, at);
  } catch (err) {
    closeSync(fd);
    throw err;
  }
  let open = true;
  return {
    path: `/proc/${process.pid}/fd/${fd}`,
    close: () => {
      if (open) closeSync(fd);
      open = false;
    },
  };
}
