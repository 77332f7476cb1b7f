import type { Stats } from "node:fs";
import { lstat, readdir } from "node:fs/promises";
import { resolve } from "node:path";
import { WriteEntry, WriteEntrySync, type TarOptionsWithAliases } from "tar";

/**
 * Files up to this size are packed with synchronous fs calls. node-tar's own
 * packer makes every lstat, open, read and close a thread-pool round trip,
 * which for a workspace of many small files costs several times the reading
 * itself; a file this small holds the event loop for well under a millisecond.
 * Larger files stream with asynchronous reads.
 */
export const SYNC_PACK_MAX_BYTES = 1024 * 1024;

/** The end of a tar archive: two zero blocks. */
const TAR_END = Buffer.alloc(1024);

function packable(stat: Stats): boolean {
  return stat.isFile() || stat.isDirectory() || stat.isSymbolicLink();
}

/** ENOENT: the path went away while the tree was walked (a live workspace); it is left out. */
function isGone(err: unknown): boolean {
  return (err as { code?: unknown }).code === "ENOENT";
}

/** Children of a directory whose lstat is asked at once: the walk's round trips overlap. */
const LSTAT_BATCH = 64;

async function lstatOrGone(absolute: string): Promise<Stats | undefined> {
  try {
    return await lstat(absolute);
  } catch (err) {
    if (isGone(err)) return undefined;
    throw err;
  }
}

/**
 * Every packable path under `rel` (itself first, then its children depth
 * first, by name), with its lstat. Links are not followed; FIFOs, sockets and
 * devices are left out.
 */
async function* walk(cwd: string, rel: string, stat: Stats | undefined, statCache: Map<string, Stats>): AsyncGenerator<{ rel: string; absolute: string; stat: Stats }> {
  const absolute = resolve(cwd, rel);
  if (!stat || !packable(stat)) return;
  statCache.set(absolute, stat);
  yield { rel, absolute, stat };
  if (!stat.isDirectory()) return;
  let names: string[];
  try {
    names = (await readdir(absolute)).sort();
  } catch (err) {
    if (isGone(err)) return;
    throw err;
  }
  // node-tar's naming: the children of "." are "./name".
  const base = rel.endsWith("/") ? rel : `${rel}/`;
  for (let at = 0; at < names.length; at += LSTAT_BATCH) {
    const batch = names.slice(at, at + LSTAT_BATCH).map((name) => base + name);
    const stats = await Promise.all(batch.map((child) => lstatOrGone(resolve(cwd, child))));
    for (const [i, child] of batch.entries()) yield* walk(cwd, child, stats[i], statCache);
  }
}

/** One small entry (header, body, padding), read with synchronous calls. */
function syncEntry(rel: string, opts: TarOptionsWithAliases): Buffer[] {
  const chunks: Buffer[] = [];
  const entry = new WriteEntrySync(rel, opts);
  entry.on("data", (chunk: Buffer) => chunks.push(chunk));
  return chunks;
}

/**
 * A plain tar of `entries` (paths relative to cwd, directories recursively),
 * as a pull-based sequence of chunks: uid/gid and other host specifics are
 * left out (portable), symlinks are stored as links. Entries are node-tar's
 * own, so any tar reads the result.
 */
export async function* tarChunks(cwd: string, entries: readonly string[]): AsyncGenerator<Buffer> {
  const statCache = new Map<string, Stats>();
  const opts: TarOptionsWithAliases = { cwd, portable: true, statCache, linkCache: new Map() };
  for (const top of entries) {
    for await (const { rel, absolute, stat } of walk(cwd, top, await lstatOrGone(resolve(cwd, top)), statCache)) {
      if (stat.isFile() && stat.size > SYNC_PACK_MAX_BYTES) {
        for await (const chunk of new WriteEntry(rel, opts) as AsyncIterable<Buffer>) yield chunk;
      } else {
        yield* syncEntry(rel, opts);
      }
      // Written: its stat is not needed again (the cache would otherwise hold the whole tree's).
      statCache.delete(absolute);
    }
  }
  yield TAR_END;
}
