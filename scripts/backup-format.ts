// What `scripts/backup.ts` writes and `scripts/restore.ts` reads (docs/operations.md,
// Backup and restore): the set of state that is backed up, the manifest, the
// command lines and the typed errors both scripts share.
import { createHash } from "node:crypto";
import { createReadStream, readFileSync } from "node:fs";
import { z } from "zod";
import { Buckets, ObjectStores, objectStoreKind } from "@paddock/contracts";
import { intFlag, parseScriptFlags, ScriptUsageError, stringFlag, switchFlag, type ScriptArgs } from "@paddock/testing";

export const BACKUP_FORMAT = "paddock-backup/1";

/**
 * Buckets that are not state worth restoring: a restored runner lease would
 * call a runner alive that is not; sign-ons in flight expire within minutes.
 * Every other bucket in `Buckets` is backed up (one definition: a bucket added
 * there is backed up unless it is named here).
 */
export const SKIPPED_BUCKETS: readonly string[] = [Buckets.runnerLeases, Buckets.oidc];

/** The KV buckets a backup holds, from shared/contracts. */
export function backedUpBuckets(): string[] {
  return Object.values(Buckets).filter((b) => !SKIPPED_BUCKETS.includes(b));
}

/**
 * The object stores a backup holds: the checkpoints and environment snapshots,
 * shared and per runner (objectStoreKind). `transfers` is not: its objects are
 * in transit and deleted after each push or pull.
 */
export function isBackedUpStore(store: string): boolean {
  return store !== ObjectStores.transfers && objectStoreKind(store) !== undefined;
}

/**
 * A runner's chunk stream (`runnerChunkStream`, docs/decisions/0062): the
 * chunks its manifest checkpoints name. Backed up with the checkpoint stores,
 * or a restored manifest checkpoint could not be restored. Its owner is
 * `chunkStreamOwner` (@paddock/contracts).
 */
export function isChunkStream(name: string): boolean {
  return /^chunks-runner-[A-Za-z0-9_-]+$/.test(name);
}

/** One runner's chunk stream in a backup: its records file (scripts/backup-chunks.ts) and how many chunks it holds. */
export const ManifestChunkStream = z.object({
  stream: z.string().refine(isChunkStream, "is not a chunk stream"),
  /** The data file (relative path). */
  file: z.string().min(1),
  chunks: z.number().int().nonnegative(),
});
export type ManifestChunkStream = z.infer<typeof ManifestChunkStream>;

export interface ManifestFile {
  /** Relative to the backup directory. */
  path: string;
  bytes: number;
  sha256: string;
}

export interface ManifestObject {
  name: string;
  /** The data file (relative path). */
  file: string;
  size: number;
  /** The object store's own digest of the data (`SHA-256=…`), checked again after a restore. */
  digest: string;
  description?: string;
  metadata?: Record<string, string>;
}

export interface Manifest {
  format: typeof BACKUP_FORMAT;
  createdAt: string;
  kv: Array<{ bucket: string; file: string; entries: number }>;
  objectStores: Array<{ store: string; objects: ManifestObject[] }>;
  /** One file of chunk records per runner's chunk stream (scripts/backup-chunks.ts); absent from backups older than chunks. */
  chunkStreams?: ManifestChunkStream[];
  /** Every data file with its length and sha256: a restore checks them all before it writes anything. */
  files: ManifestFile[];
}

/** One line of a bucket's JSON-lines file: the latest value of a key. */
export interface KvLine {
  key: string;
  /** base64 */
  value: string;
}

/** A backup file is not what the manifest says (or the manifest is unreadable): nothing was written. */
export class BackupCorruptError extends Error {
  readonly code = "backup-corrupt" as const;
  override readonly name = "BackupCorruptError";
}

/** The target server already holds Paddock state and `--force` was not given: nothing was written. */
export class RestoreTargetNotEmptyError extends Error {
  readonly code = "target-not-empty" as const;
  override readonly name = "RestoreTargetNotEmptyError";
}

/** After writing, what the server holds differs from the backup. */
export class RestoreVerifyError extends Error {
  readonly code = "verify-failed" as const;
  override readonly name = "RestoreVerifyError";
}

export async function sha256OfFile(path: string): Promise<string> {
  const hash = createHash("sha256");
  for await (const chunk of createReadStream(path)) hash.update(chunk as Buffer);
  return hash.digest("hex");
}

export interface ConnectArgs {
  nats: string;
  /** A Paddock NATS credentials file (`{"user","password"}` JSON, as PADDOCK_NATS_CREDS_FILE). */
  creds?: string;
  user?: string;
  passwordFile?: string;
}

const CONNECT_USAGE = `  --nats URL            the NATS server(s), comma-separated (required)
  --creds FILE          a {"user","password"} JSON credentials file (as PADDOCK_NATS_CREDS_FILE)
  --user U --password-file F
                        or a user and a file holding its password
  -h, --help            this text`;

export const BACKUP_USAGE = `usage: node --import tsx scripts/backup.ts --nats URL --out DIR [--creds FILE | --user U --password-file F]

  --out DIR             where to write the backup (made; must be empty or absent)
${CONNECT_USAGE}`;

export const RESTORE_USAGE = `usage: node --import tsx scripts/restore.ts --nats URL --from DIR [--replicas N] [--force] [--creds FILE | --user U --password-file F]

  --from DIR            a directory written by scripts/backup.ts
  --replicas N          replicas of what the restore provisions, 1 to 5 (default 1; 3 in production)
  --force               restore into a server that already holds Paddock state (keys and objects are overwritten)
${CONNECT_USAGE}`;

const CONNECT_SPEC = {
  nats: { type: "string" },
  creds: { type: "string" },
  user: { type: "string" },
  "password-file": { type: "string" },
} as const;

function connectArgs(script: string, flags: ReadonlyMap<string, boolean | string>): ConnectArgs {
  const nats = stringFlag(script, flags, "nats", "");
  if (nats === "") throw new ScriptUsageError(`${script}: --nats URL is required`);
  const creds = flags.has("creds") ? stringFlag(script, flags, "creds", "") : undefined;
  const user = flags.has("user") ? stringFlag(script, flags, "user", "") : undefined;
  const passwordFile = flags.has("password-file") ? stringFlag(script, flags, "password-file", "") : undefined;
  if (creds !== undefined && (user !== undefined || passwordFile !== undefined)) throw new ScriptUsageError(`${script}: --creds and --user/--password-file do not go together`);
  if ((user === undefined) !== (passwordFile === undefined)) throw new ScriptUsageError(`${script}: --user and --password-file go together`);
  return { nats, ...(creds !== undefined ? { creds } : {}), ...(user !== undefined ? { user } : {}), ...(passwordFile !== undefined ? { passwordFile } : {}) };
}

export function parseBackupArgs(argv: readonly string[]): ScriptArgs<ConnectArgs & { out: string }> {
  const parsed = parseScriptFlags("backup", argv, { ...CONNECT_SPEC, out: { type: "string" } });
  if (parsed.help) return parsed;
  const out = stringFlag("backup", parsed.values, "out", "");
  if (out === "") throw new ScriptUsageError("backup: --out DIR is required");
  return { help: false, values: { ...connectArgs("backup", parsed.values), out } };
}

export function parseRestoreArgs(argv: readonly string[]): ScriptArgs<ConnectArgs & { from: string; replicas: number; force: boolean }> {
  const parsed = parseScriptFlags("restore", argv, { ...CONNECT_SPEC, from: { type: "string" }, replicas: { type: "string" }, force: { type: "boolean" } });
  if (parsed.help) return parsed;
  const from = stringFlag("restore", parsed.values, "from", "");
  if (from === "") throw new ScriptUsageError("restore: --from DIR is required");
  return {
    help: false,
    values: {
      ...connectArgs("restore", parsed.values),
      from,
      replicas: intFlag("restore", parsed.values, "replicas", { min: 1, max: 5 }, 1),
      force: switchFlag(parsed.values, "force"),
    },
  };
}

/** The user and password to connect with, read from the files named; none without. */
export function credentialsOf(args: ConnectArgs): { user: string; pass: string } | undefined {
  if (args.creds !== undefined) {
    const parsed = JSON.parse(readFileSync(args.creds, "utf8")) as { user?: unknown; password?: unknown };
    if (typeof parsed.user !== "string" || typeof parsed.password !== "string") throw new ScriptUsageError(`--creds: ${args.creds} is not {"user","password"} JSON`);
    return { user: parsed.user, pass: parsed.password };
  }
  if (args.user !== undefined && args.passwordFile !== undefined) return { user: args.user, pass: readFileSync(args.passwordFile, "utf8").trim() };
  return undefined;
}
