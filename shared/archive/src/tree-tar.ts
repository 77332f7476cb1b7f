import { header } from "./tar-header.ts";

/** An entry to write into a tar, by path relative to the archive's root ("a/b"). */
export type TreeEntry =
  | { type: "dir"; path: string; mode: number }
  | { type: "file"; path: string; mode: number; size: number; mtimeMs: number }
  | { type: "symlink"; path: string; target: string; mtimeMs: number }
  /** A hard link to an earlier file entry (its path in target). */
  | { type: "link"; path: string; target: string };

const BLOCK = 512;

/** The end of a tar archive: two zero blocks. */
const TAR_END = Buffer.alloc(2 * BLOCK);

/**
 * A plain tar of entries, named as packDirectory names them ("./a/b"), each
 * file's bytes taken from body(entry): exactly `size` of them, or the
 * archive fails (a short or long body is never written as a different file).
 * What extractArchive reads, with all its checks: a restore goes through the
 * same gate as any archive.
 */
export async function* treeTar<E extends TreeEntry>(entries: Iterable<E> | AsyncIterable<E>, body: (entry: E & { type: "file" }) => AsyncIterable<Buffer>): AsyncGenerator<Buffer> {
  yield header({ path: "./", type: "Directory", mode: 0o755, size: 0 });
  for await (const entry of entries) {
    const path = `./${entry.path}`;
    switch (entry.type) {
      case "dir":
        yield header({ path: `${path}/`, type: "Directory", mode: entry.mode, size: 0 });
        break;
      case "symlink":
        yield header({ path, type: "SymbolicLink", linkpath: entry.target, mode: 0o777, size: 0, mtime: new Date(entry.mtimeMs) });
        break;
      case "link":
        yield header({ path, type: "Link", linkpath: `./${entry.target}`, mode: 0o644, size: 0 });
        break;
      case "file":
        yield header({ path, type: "File", mode: entry.mode, size: entry.size, mtime: new Date(entry.mtimeMs) });
        yield* fileBlocks(entry as E & { type: "file" }, body);
        break;
    }
  }
  yield TAR_END;
}

async function* fileBlocks<E extends TreeEntry>(entry: E & { type: "file" }, body: (entry: E & { type: "file" }) => AsyncIterable<Buffer>): AsyncGenerator<Buffer> {
  let written = 0;
  for await (const chunk of body(entry)) {
    written += chunk.length;
    if (written > entry.size) throw new Error(`${entry.path}: more bytes than its size`);
    yield chunk;
  }
  if (written !== entry.size) throw new Error(`${entry.path}: fewer bytes than its size`);
  const pad = (BLOCK - (written % BLOCK)) % BLOCK;
  if (pad > 0) yield Buffer.alloc(pad);
}
