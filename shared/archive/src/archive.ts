import { basename, dirname, posix } from "node:path";
import { Readable, Transform, type TransformCallback } from "node:stream";
import { pipeline } from "node:stream/promises";
import { constants as zlibConstants, createGunzip } from "node:zlib";
import { DirFd, type FileOwner } from "./dir-fd.ts";
import { ArchiveRejectedError } from "./errors.ts";
import { tarChunks, type PackHooks } from "./pack.ts";
import type { InsideTarget } from "./paths.ts";
import { descriptorUnpacker, type UnpackHooks, type UnpackOptions } from "./unpack.ts";
import { parallelGzip } from "./parallel-gzip.ts";
import { SealError } from "./sealed.ts";

/** The only archive format Paddock writes and reads. */
export const ARCHIVE_FORMAT = "tar+gzip";

/** Entry types an archive may contain; devices, FIFOs and anything else are refused. */
const allowedTypes: ReadonlySet<string> = new Set(["File", "OldFile", "ContiguousFile", "Directory", "SymbolicLink", "Link"]);

/** Bounds of one extraction: entries and total file bytes (uncompressed). */
export interface ExtractLimits {
  maxEntries: number;
  maxBytes: number;
}

export interface ExtractResult {
  entries: number;
  bytes: number;
}

export interface PackOptions {
  /** gzip the tar (default true); false yields a plain tar (the CLI gzips it itself to measure progress). */
  gzip?: boolean;
  /** Open a path root even when it is a symlink (default true: the CLI's user named it); the runner's workspaces pass false. */
  followRoot?: boolean;
  hooks?: PackHooks;
  /** A sandboxed session's workspace: only regular files this user owns are packed (not another user's file it hard-linked in). */
  owner?: FileOwner | undefined;
}

/**
 * A gzipped tar of everything under dir, as a pull-based web stream: the
 * archive is produced as the consumer reads it and never held in memory.
 * Only regular files, directories and symlinks (not followed) are packed;
 * uid/gid and other host specifics are left out (portable).
 */
export function packDirectory(dir: string, opts: PackOptions = {}): ReadableStream<Uint8Array> {
  return packEntries(dir, ["."], opts);
}

/**
 * A tar of one path: a directory's contents (as `./…`), or a single file under
 * its own name. The caller has checked that target is where it should be.
 */
export function packTarget(target: string, kind: "directory" | "file", opts: PackOptions = {}): ReadableStream<Uint8Array> {
  return kind === "directory" ? packEntries(target, ["."], opts) : packEntries(dirname(target), [basename(target)], opts);
}

/**
 * A tar of a target resolved by resolveInside, read through its held
 * descriptor (never by path). The caller closes the target once the stream
 * has ended.
 */
export function packInside(target: InsideTarget, opts: PackOptions = {}): ReadableStream<Uint8Array> {
  return packEntries(target.dir, target.name === undefined ? ["."] : [target.name], opts);
}

/** How far the packer may run ahead of its reader, in bytes: gzip and the reader's writes overlap. */
const PACK_LOOKAHEAD_BYTES = 4 * 1024 * 1024;

function packEntries(cwd: string | DirFd, entries: string[], opts: PackOptions): ReadableStream<Uint8Array> {
  // Gzip below runs in the libuv pool (zlib's stream), beside the walk and the reader.
  const source = Readable.from(tarChunks(cwd, entries, opts.hooks, opts.followRoot ?? true, opts.owner), { objectMode: false });
  let out: Readable = source;
  if (opts.gzip ?? true) {
    // Fastest level: a checkpoint is on the suspend/resume path, where time
    // matters more than the last 10-20 % of size.
    const gzip = parallelGzip({ level: zlibConstants.Z_BEST_SPEED });
    pipeline(source, gzip).catch(() => undefined);
    out = gzip;
  }
  const chunks = out[Symbol.asyncIterator]() as AsyncIterator<Buffer>;
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        const next = await chunks.next();
        if (next.done) controller.close();
        else controller.enqueue(new Uint8Array(next.value.buffer, next.value.byteOffset, next.value.byteLength));
      },
      async cancel() {
        await chunks.return?.();
      },
    },
    { highWaterMark: PACK_LOOKAHEAD_BYTES, size: (chunk) => chunk.byteLength },
  );
}

function pathViolation(raw: string): string | undefined {
  const path = raw.replaceAll("\\", "/");
  if (path.startsWith("/") || /^[A-Za-z]:/.test(path)) return "absolute path";
  if (path.split("/").includes("..")) return "path contains ..";
  if (path.includes("\0")) return "path contains NUL";
  return undefined;
}

/**
 * Why an entry may not be extracted under the target directory, or undefined
 * when it is fine. Pure string checks on the raw header, before node-tar's
 * own (stricter-than-default) checks run as a second line.
 */
export function entryViolation(entry: { path: string; type: string; linkpath?: string | undefined }): string | undefined {
  if (!allowedTypes.has(entry.type)) return `unsupported entry type ${entry.type}`;
  const bad = pathViolation(entry.path);
  if (bad) return bad;
  if (entry.type === "SymbolicLink" || entry.type === "Link") {
    const link = (entry.linkpath ?? "").replaceAll("\\", "/");
    if (link === "") return "empty link target";
    if (link.startsWith("/")) return "absolute link target";
    // A symlink resolves from its own directory, a hard link from the archive root.
    const base = entry.type === "SymbolicLink" ? posix.dirname(entry.path.replaceAll("\\", "/")) : ".";
    const resolved = posix.normalize(posix.join(base, link));
    if (resolved === ".." || resolved.startsWith("../")) return "link escapes the workspace";
  }
  return undefined;
}

/**
 * Size of the inflated chunks handed to the tar parser. zlib's default (16 KiB)
 * turns a 1 MiB file into 64 separate writes; larger chunks mean fewer writes
 * and fewer trips through the parser.
 */
const INFLATE_CHUNK_BYTES = 256 * 1024;

/** Counts decompressed bytes and fails past a cap: a decompression bomb stops here, whatever its entries say. */
class ByteCap extends Transform {
  private seen = 0;
  constructor(
    private readonly cap: number,
    private readonly onExceeded: () => ArchiveRejectedError,
  ) {
    super();
  }

  override _transform(chunk: Buffer, _enc: BufferEncoding, cb: TransformCallback): void {
    this.seen += chunk.length;
    if (this.seen > this.cap) cb(this.onExceeded());
    else cb(null, chunk);
  }
}

export interface ExtractOptions {
  /** gunzip the source first (default true). */
  gzip?: boolean;
  /** As PackOptions.followRoot. */
  followRoot?: boolean;
  hooks?: UnpackHooks;
  /** A sandboxed session's workspace: every inode made is given to this user as it is made (unpack.ts). */
  owner?: FileOwner | undefined;
  /** Each file's bytes written by descriptor, not read from the (then empty) entries (unpack.ts UnpackOptions.fill). */
  fill?: UnpackOptions["fill"];
}

/**
 * Extracts a gzipped tar (a plain one with `gzip: false`) from source into dir
 * (which must exist: a path, opened following a link unless followRoot is
 * false, or a directory held by descriptor, left open). Refuses the whole
 * archive on the first entry that is absolute, climbs out with `..`, links
 * outside dir or is not a file, directory or link, and (with limits) on the
 * entry that goes past maxEntries or maxBytes: that entry is never written,
 * extraction stops at once, and the call rejects with ArchiveRejectedError (a
 * sealed source that does not open: its SealError). Entries are placed through
 * descriptors (unpack.ts): a symlink in the workspace on an entry's path
 * refuses the archive, whenever the sandbox made it. The archive's owners are
 * never applied (what is made belongs to opts.owner, or the caller).
 */
export async function extractArchive(source: Readable, dir: string | DirFd, limits?: ExtractLimits, opts: ExtractOptions = {}): Promise<ExtractResult> {
  let refused: ArchiveRejectedError | undefined;
  let entries = 0;
  let bytes = 0;
  const stop = new AbortController();
  const refuse = (err: ArchiveRejectedError): false => {
    refused ??= err;
    stop.abort();
    return false;
  };
  const accept = (entry: { path: string; type: string; linkpath?: string | undefined; size?: number; header: { path?: string; linkpath?: string } }): boolean => {
    if (refused !== undefined) return false;
    const reason =
      entryViolation({ path: entry.path, type: entry.type, linkpath: entry.linkpath }) ??
      entryViolation({ path: entry.header.path ?? entry.path, type: entry.type, linkpath: entry.header.linkpath ?? entry.linkpath });
    if (reason !== undefined) return refuse(new ArchiveRejectedError(reason));
    entries += 1;
    bytes += entry.size ?? 0;
    if (limits && entries > limits.maxEntries) return refuse(new ArchiveRejectedError(`more than ${limits.maxEntries} entries`, true));
    if (limits && bytes > limits.maxBytes) return refuse(new ArchiveRejectedError(`more than ${limits.maxBytes} bytes`, true));
    return true;
  };
  // Headers, padding and pax records on top of the file bytes; generous, but finite.
  const cap = limits ? limits.maxBytes + limits.maxEntries * 3072 + (1 << 20) : Number.POSITIVE_INFINITY;
  const capper = new ByteCap(cap, () => {
    refused ??= new ArchiveRejectedError("archive expands past the byte limit", true);
    return refused;
  });
  let root: DirFd;
  try {
    root = typeof dir === "string" ? DirFd.open(dir, { follow: opts.followRoot ?? true }) : dir;
  } catch (err) {
    source.destroy();
    throw err;
  }
  const { parser, release, idle } = descriptorUnpacker(root, accept, refuse, { hooks: opts.hooks, owner: opts.owner, fill: opts.fill });
  try {
    if (opts.gzip ?? true) await pipeline(source, createGunzip({ chunkSize: INFLATE_CHUNK_BYTES }), capper, parser, { signal: stop.signal });
    else await pipeline(source, capper, parser, { signal: stop.signal });
    await idle(false);
  } catch (err) {
    await idle(true);
    if (refused !== undefined) throw refused;
    // A sealed source that does not open says so, rather than "invalid archive".
    if (source.errored instanceof SealError) throw source.errored;
    const code = (err as { tarCode?: unknown; code?: unknown }).tarCode ?? (err as { code?: unknown }).code;
    throw new ArchiveRejectedError(typeof code === "string" ? `invalid archive (${code})` : "invalid archive");
  } finally {
    release();
    if (root !== dir) root.close();
  }
  if (refused !== undefined) throw refused;
  return { entries, bytes };
}
