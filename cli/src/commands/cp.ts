import { createReadStream, createWriteStream } from "node:fs";
import { chmod, lstat, mkdir, mkdtemp, readdir, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { basename, dirname, join } from "node:path";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import type { ReadableStream as NodeWebReadableStream } from "node:stream/web";
import { createGunzip, createGzip } from "node:zlib";
import { ArchiveRejectedError, extractArchive, packTarget } from "@paddock/archive";
import { FileWriteReply, HttpApi, WorkspacePath, WorkspacePushReply, type FileEntry } from "@paddock/contracts";
import { apiOf, parseCommand, positionals, type Command, type Ctx } from "../command.ts";
import type { ApiClient } from "../http.ts";
import { ApiError, ExitCode, UsageError } from "../io.ts";
import { counter, Progress } from "../progress.ts";
import { parseRemote, type RemoteRef } from "./workspace.ts";

/** Limits on what a download extracts locally (the same rules as the runner). */
const LOCAL_LIMITS = { maxEntries: 1_000_000, maxBytes: 64 * 1024 * 1024 * 1024 };

/** A copy that cannot be made as asked (docker cp's error conditions); printed as an API error, exit 1. */
export class CopyError extends ApiError {
  constructor(code: "invalid" | "not_found", where: string, why: string) {
    super(code, `${where}: ${why}`);
    this.name = "CopyError";
  }
}

/** `SRC/.` (or `.`): a directory's contents rather than the directory. */
const contentsOnly = (p: string) => p === "." || p.endsWith("/.");
/** The segments of a workspace path, without "" and ".". */
const segmentsOf = (p: string) => p.split("/").filter((s) => s !== "" && s !== ".");
const joinRemote = (...parts: string[]) => parts.flatMap(segmentsOf).join("/");
const octal = (mode: number) => (mode & 0o777).toString(8).padStart(3, "0");

type Kind = Pick<FileEntry, "type" | "mode">;

/**
 * What a workspace path is (undefined: nothing there), from a listing of its
 * parent, which answers its type and mode; a missing parent is an error of
 * its own, as in docker cp. A parent too big to list whole falls back to
 * listing the path itself (a file answers "not a directory").
 */
async function remoteKind(api: ApiClient, ref: RemoteRef): Promise<Kind | undefined> {
  const segments = segmentsOf(ref.path);
  if (segments.length === 0) return { type: "dir", mode: 0o755 };
  const path = segments.join("/");
  const params = { id: ref.sessionId };
  try {
    const list = await api.call(HttpApi.listFiles, { params, query: { path: segments.slice(0, -1).join("/"), depth: 1 } });
    const entry = list.entries.find((e) => e.path === path);
    if (entry || !list.truncated) return entry;
  } catch (err) {
    if (err instanceof ApiError && err.code === "not_found" && /path/.test(err.message)) throw new CopyError("not_found", `${ref.sessionId}:${ref.path}`, "no such directory (its parent is missing)");
    throw err;
  }
  try {
    await api.call(HttpApi.listFiles, { params, query: { path, depth: 1 } });
    return { type: "dir", mode: 0o755 };
  } catch (err) {
    if (err instanceof ApiError && err.code === "not_found") return undefined;
    if (err instanceof ApiError && err.code === "invalid") return { type: "file", mode: 0o644 };
    throw err;
  }
}

/** What a local path is (undefined: nothing there); a missing parent is an error, as in docker cp. */
async function localKind(path: string): Promise<"file" | "dir" | "other" | undefined> {
  const st = await stat(path).catch((err: NodeJS.ErrnoException) => {
    if (err.code === "ENOENT") return undefined;
    if (err.code === "ENOTDIR") throw new CopyError("invalid", path, "not a directory");
    throw err;
  });
  if (st) return st.isDirectory() ? "dir" : st.isFile() ? "file" : "other";
  if (!(await stat(dirname(path)).catch(() => undefined))?.isDirectory()) throw new CopyError("not_found", path, "no such directory (its parent is missing)");
  return undefined;
}

const body = (res: Response) => {
  if (!res.body) throw new ApiError("internal", "the gateway answered no bytes");
  return Readable.fromWeb(res.body as NodeWebReadableStream<Uint8Array>);
};

/** A tar on stdin (plain, as docker cp takes it, or already gzipped) extracted into the directory dst. */
async function uploadTar(ctx: Ctx, api: ApiClient, dst: RemoteRef): Promise<void> {
  const kind = await remoteKind(api, dst);
  if (kind?.type !== "dir") throw new CopyError(kind ? "invalid" : "not_found", `${dst.sessionId}:${dst.path}`, kind ? "not a directory" : "no such directory");
  const it = (ctx.io.stdin as AsyncIterable<Buffer>)[Symbol.asyncIterator]();
  const first = await it.next();
  const head = first.done ? Buffer.alloc(0) : Buffer.from(first.value);
  const all = Readable.from((async function* () {
    yield head;
    for (let n = await it.next(); !n.done; n = await it.next()) yield Buffer.from(n.value);
  })());
  const gzipped = head[0] === 0x1f && head[1] === 0x8b ? all : all.pipe(createGzip());
  await push(api, dst.sessionId, segmentsOf(dst.path).join("/"), gzipped);
}

async function push(api: ApiClient, sessionId: string, path: string, gz: Readable): Promise<void> {
  const res = await api.uploadTo(HttpApi.pushWorkspace, { params: { id: sessionId }, query: { path } }, Readable.toWeb(gz) as ReadableStream<Uint8Array>);
  if (!WorkspacePushReply.safeParse(await res.json()).success) throw new ApiError("internal", "unexpected answer to the upload");
}

async function upload(ctx: Ctx, api: ApiClient, local: string, dst: RemoteRef): Promise<void> {
  const st = await lstat(local).catch(() => undefined);
  const kind = st?.isSymbolicLink() ? (await stat(local).catch(() => undefined))?.isDirectory() ? "dir" : "file" : st?.isDirectory() ? "dir" : "file";
  if (!st || !(st.isDirectory() || st.isFile() || st.isSymbolicLink())) throw new CopyError("not_found", local, "no such file or directory");
  const where = `${dst.sessionId}:${dst.path}`;
  const there = await remoteKind(api, dst);
  if (there?.type === "symlink") throw new CopyError("invalid", where, "is a symbolic link; name the directory it is in");
  if (kind === "file") {
    if (local.endsWith("/")) throw new CopyError("invalid", local, "not a directory");
    if (!there && dst.path.endsWith("/")) throw new CopyError("invalid", where, "not a directory (and does not exist)");
    const path = there?.type === "dir" ? joinRemote(dst.path, basename(local)) : joinRemote(dst.path);
    const mode = octal((await stat(local)).mode);
    const res = await api.uploadTo(HttpApi.writeFile, { params: { id: dst.sessionId }, query: { path, mode } }, Readable.toWeb(createReadStream(local)) as ReadableStream<Uint8Array>);
    if (!FileWriteReply.safeParse(await res.json()).success) throw new ApiError("internal", "unexpected answer to the write");
    return;
  }
  if (there?.type === "file") throw new CopyError("invalid", where, "cannot copy a directory onto a file");
  // Into an existing directory under its own name, unless SRC/. asks for its contents.
  const path = there && !contentsOnly(local) ? joinRemote(dst.path, basename(local)) : joinRemote(dst.path);
  const progress = new Progress(ctx.io.stderr, `→ ${dst.sessionId}:${path || "."}`, await sizeOf(local));
  // A plain tar, counted, then gzipped here: progress follows the files, not the compressed size.
  const tar = Readable.fromWeb(packTarget(local, "directory", { gzip: false }) as NodeWebReadableStream<Uint8Array>);
  const gz = tar.pipe(counter((n) => progress.add(n))).pipe(createGzip());
  tar.once("error", (err) => gz.destroy(err));
  try {
    await push(api, dst.sessionId, path, gz);
  } finally {
    progress.done();
  }
}

/** Bytes of regular files under path (symlinks not followed): the progress total of an upload. */
async function sizeOf(path: string): Promise<number> {
  const st = await lstat(path);
  if (st.isFile()) return st.size;
  if (!st.isDirectory()) return 0;
  let total = 0;
  for (const name of await readdir(path)) total += await sizeOf(join(path, name));
  return total;
}

/** The workspace archive of src (a directory's contents, or a file under its name) extracted into the existing directory dir. */
async function extractPulled(ctx: Ctx, api: ApiClient, src: RemoteRef, dir: string): Promise<void> {
  const res = await api.open(HttpApi.pullWorkspace, { params: { id: src.sessionId }, query: { path: segmentsOf(src.path).join("/") } });
  const length = Number(res.headers.get("content-length") ?? "");
  const progress = new Progress(ctx.io.stderr, `← ${src.sessionId}:${src.path || "."}`, Number.isFinite(length) && length > 0 ? length : undefined);
  const raw = body(res);
  const counted = raw.pipe(counter((n) => progress.add(n)));
  raw.once("error", (err) => counted.destroy(err));
  try {
    await extractArchive(counted, dir, LOCAL_LIMITS);
  } catch (err) {
    if (err instanceof ArchiveRejectedError) throw new ApiError(err.tooLarge ? "too_large" : "invalid", err.message);
    throw err;
  } finally {
    progress.done();
  }
}

/** src as a plain tar on stdout, as docker cp writes it: a file or a directory under its own name, `DIR/.` as its contents. */
async function downloadTar(ctx: Ctx, api: ApiClient, src: RemoteRef, kind: Kind): Promise<void> {
  const name = segmentsOf(src.path).at(-1);
  if (kind.type === "file" || contentsOnly(src.path) || name === undefined) {
    const res = await api.open(HttpApi.pullWorkspace, { params: { id: src.sessionId }, query: { path: segmentsOf(src.path).join("/") } });
    await pipeline(body(res), createGunzip(), ctx.io.stdout, { end: false });
    return;
  }
  // The archive holds a directory's contents (./…); its own name goes on top by unpacking it here and packing it again.
  const scratch = await mkdtemp(join(tmpdir(), "paddock-cp-"));
  try {
    await mkdir(join(scratch, name));
    await extractPulled(ctx, api, src, join(scratch, name));
    // packTarget's "file" form packs one named entry of its parent, a directory included.
    await pipeline(Readable.fromWeb(packTarget(join(scratch, name), "file", { gzip: false }) as NodeWebReadableStream<Uint8Array>), ctx.io.stdout, { end: false });
  } finally {
    await rm(scratch, { recursive: true, force: true });
  }
}

async function download(ctx: Ctx, api: ApiClient, src: RemoteRef, local: string): Promise<void> {
  const where = `${src.sessionId}:${src.path}`;
  const kind = await remoteKind(api, src);
  if (!kind) throw new CopyError("not_found", where, "no such file or directory");
  if (kind.type === "symlink") throw new CopyError("invalid", where, "is a symbolic link; name the directory it is in");
  if (kind.type === "file" && (src.path.endsWith("/") || contentsOnly(src.path))) throw new CopyError("invalid", where, "not a directory");
  if (local === "-") return downloadTar(ctx, api, src, kind);
  const here = await localKind(local);
  if (here === "other") throw new CopyError("invalid", local, "not a file or directory");
  if (kind.type === "file") {
    if (!here && local.endsWith("/")) throw new CopyError("invalid", local, "not a directory (and does not exist)");
    const name = segmentsOf(src.path).at(-1) ?? "";
    const target = here === "dir" ? join(local, name) : local;
    const res = await api.open(HttpApi.readFile, { params: { id: src.sessionId }, query: { path: segmentsOf(src.path).join("/") } });
    await pipeline(body(res), createWriteStream(target, { mode: kind.mode & 0o777 }));
    // The umask narrowed the mode a new file was made with, and an existing file keeps its own: set it as the source's.
    await chmod(target, kind.mode & 0o777);
    return;
  }
  if (here === "file") throw new CopyError("invalid", local, "cannot copy a directory onto a file");
  const name = segmentsOf(src.path).at(-1);
  const target = here === "dir" && !contentsOnly(src.path) && name !== undefined ? join(local, name) : local;
  const made = await lstat(target).catch(() => undefined);
  if (made && !made.isDirectory()) throw new CopyError("invalid", target, "exists and is not a directory");
  await mkdir(target, { recursive: true, mode: kind.mode & 0o777 });
  await extractPulled(ctx, api, src, target);
}

function checkRemotePath(ref: RemoteRef): void {
  const parsed = WorkspacePath.safeParse(ref.path);
  if (!parsed.success) throw new UsageError(`paddock cp: ${ref.sessionId}:${ref.path}: ${parsed.error.issues[0]?.message ?? "invalid path"}`);
}

export const cpCommand: Command = {
  name: "cp",
  summary: "copy files and directories into or out of a session's workspace (as docker cp)",
  help: `usage: paddock cp LOCAL|- ID:PATH
       paddock cp ID:PATH LOCAL|-

Copies between this machine and the workspace of a live session (running or
warm-suspended), as docker cp does. PATH is relative to the workspace (""
or "." is the workspace itself). For SRC and DEST:

  SRC is a file:
    DEST does not exist        the file is written as DEST (its parent must exist)
    DEST does not exist and    error: not a directory
      ends with /
    DEST is a file             it is overwritten
    DEST is a directory        the file is copied into it under its own name
  SRC is a directory:
    DEST does not exist        DEST is made, with SRC's contents (its parent must exist)
    DEST is a file             error
    DEST is a directory        SRC is copied into it under its own name;
                               SRC/. copies SRC's contents into DEST

A LOCAL of - is a tar stream: read from stdin (plain or gzipped) and
extracted into the directory ID:PATH, or written to stdout (plain) holding
ID:PATH under its own name. Permission bits are kept. Symbolic links inside
a directory are copied as links; a local SRC that is a link is followed, a
workspace PATH that is one is refused.
Directories travel as gzipped tar, with a progress bar on a terminal stderr;
downloads are extracted with the runner's rules (absolute paths, .., links
leaving the target and device files are refused).
`,
  async run(ctx, argv) {
    const args = parseCommand(ctx, this, argv, {});
    if (!args) return ExitCode.ok;
    const [from = "", to = ""] = positionals(this, args.positionals, ["source", "destination"]);
    const src = parseRemote(from);
    const dst = parseRemote(to);
    if (src && dst) throw new UsageError("paddock cp: both sides are sessions; one must be a local path");
    if (!src && !dst) throw new UsageError("paddock cp: neither side is ID:PATH");
    const local = src ? to : from;
    if (local === "") throw new UsageError("paddock cp: the local path is empty");
    const api = apiOf(ctx);
    if (dst) {
      checkRemotePath(dst);
      if (local === "-") await uploadTar(ctx, api, dst);
      else await upload(ctx, api, local, dst);
    } else if (src) {
      checkRemotePath(src);
      await download(ctx, api, src, local);
    }
    return ExitCode.ok;
  },
};
