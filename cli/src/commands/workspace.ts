import { lstat, mkdir, readdir, stat } from "node:fs/promises";
import { join } from "node:path";
import { Readable } from "node:stream";
import type { ReadableStream as NodeWebReadableStream } from "node:stream/web";
import { createGzip } from "node:zlib";
import { ArchiveRejectedError, extractArchive, packTarget } from "@paddock/archive";
import { HttpApi, Id, WorkspacePath, WorkspacePushReply } from "@paddock/contracts";
import { apiOf, parseCommand, positionals, type Command, type Ctx } from "../command.ts";
import { json } from "../format.ts";
import { ApiError, ExitCode, UsageError, write } from "../io.ts";
import { counter, formatBytes, Progress } from "../progress.ts";


/** Limits on what `cp ID:PATH LOCAL` extracts locally (the same rules as the runner). */
const LOCAL_LIMITS = { maxEntries: 1_000_000, maxBytes: 64 * 1024 * 1024 * 1024 };

export interface RemoteRef {
  sessionId: string;
  path: string;
}

/** `ID:PATH` → a remote reference; anything else (no colon, not an id before it) is local. */
export function parseRemote(arg: string): RemoteRef | undefined {
  const colon = arg.indexOf(":");
  if (colon <= 0) return undefined;
  const sessionId = arg.slice(0, colon);
  if (!Id.safeParse(sessionId).success) return undefined;
  return { sessionId, path: arg.slice(colon + 1) };
}

function checkRemotePath(ref: RemoteRef): void {
  const parsed = WorkspacePath.safeParse(ref.path);
  if (!parsed.success) throw new UsageError(`paddock cp: ${ref.sessionId}:${ref.path}: ${parsed.error.issues[0]?.message ?? "invalid path"}`);
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

async function upload(ctx: Ctx, local: string, remote: RemoteRef): Promise<number> {
  const st = await stat(local).catch(() => undefined);
  if (!st || !(st.isDirectory() || st.isFile())) throw new ApiError("not_found", `${local}: no such file or directory`);
  const progress = new Progress(ctx.io.stderr, `→ ${remote.sessionId}:${remote.path || "."}`, await sizeOf(local));
  // A plain tar, counted, then gzipped here: progress follows the files, not the compressed size.
  const tar = Readable.fromWeb(packTarget(local, st.isDirectory() ? "directory" : "file", { gzip: false }) as NodeWebReadableStream<Uint8Array>);
  const gz = tar.pipe(counter((n) => progress.add(n))).pipe(createGzip());
  tar.once("error", (err) => gz.destroy(err));
  const res = await apiOf(ctx).uploadTo(HttpApi.pushWorkspace, { params: { id: remote.sessionId }, query: { path: remote.path } }, Readable.toWeb(gz) as ReadableStream<Uint8Array>);
  const parsed = WorkspacePushReply.safeParse(await res.json());
  progress.done();
  if (!parsed.success) throw new ApiError("internal", "unexpected answer to the upload");
  return ExitCode.ok;
}

async function download(ctx: Ctx, remote: RemoteRef, local: string): Promise<number> {
  const existing = await lstat(local).catch(() => undefined);
  if (existing && !existing.isDirectory()) throw new UsageError(`paddock cp: ${local}: exists and is not a directory`);
  const res = await apiOf(ctx).open(HttpApi.pullWorkspace, { params: { id: remote.sessionId }, query: { path: remote.path } });
  if (!res.body) throw new ApiError("internal", "the gateway answered no archive");
  const length = Number(res.headers.get("content-length") ?? "");
  const progress = new Progress(ctx.io.stderr, `← ${remote.sessionId}:${remote.path || "."}`, Number.isFinite(length) && length > 0 ? length : undefined);
  await mkdir(local, { recursive: true });
  const body = Readable.fromWeb(res.body as NodeWebReadableStream<Uint8Array>);
  const counted = body.pipe(counter((n) => progress.add(n)));
  body.once("error", (err) => counted.destroy(err));
  try {
    await extractArchive(counted, local, LOCAL_LIMITS);
  } catch (err) {
    if (err instanceof ArchiveRejectedError) throw new ApiError(err.tooLarge ? "too_large" : "invalid", err.message);
    throw err;
  } finally {
    progress.done();
  }
  return ExitCode.ok;
}

export const cpCommand: Command = {
  name: "cp",
  summary: "copy files into or out of a session's workspace",
  help: `usage: paddock cp LOCAL ID:PATH
       paddock cp ID:PATH LOCAL

Copies between this machine and the workspace of a live session (running or
warm-suspended). PATH is relative to the workspace ("" or "." for all of it).

  paddock cp ./src ID:app     the contents of ./src land in <workspace>/app
  paddock cp notes.txt ID:    notes.txt lands in the workspace
  paddock cp ID:app ./out     the contents of app land in ./out (created);
                              a file PATH lands in ./out under its own name

Transfers are gzipped tar streams; a progress bar is shown when stderr is a
terminal. Downloads are extracted with the same rules as uploads: absolute
paths, .., links leaving the target, and device files are refused.
`,
  async run(ctx, argv) {
    const args = parseCommand(ctx, this, argv, {});
    if (!args) return ExitCode.ok;
    const [from = "", to = ""] = positionals(this, args.positionals, ["source", "destination"]);
    const src = parseRemote(from);
    const dst = parseRemote(to);
    if (src && dst) throw new UsageError("paddock cp: both sides are sessions; one must be a local path");
    const local = src ? to : from;
    if (local === "") throw new UsageError("paddock cp: the local path is empty");
    if (dst) {
      checkRemotePath(dst);
      return upload(ctx, local, dst);
    }
    if (!src) throw new UsageError("paddock cp: neither side is ID:PATH");
    checkRemotePath(src);
    return download(ctx, src, local);
  },
};

export const diffCommand: Command = {
  name: "diff",
  summary: "show the per-repository git diff of a session's workspace",
  help: `usage: paddock diff ID [--json]

Prints \`git diff HEAD\` of each git repository in the session's workspace,
each under a "# repo PATH" line. Diffs are bounded by the runner; a cut one is
marked. --json prints the answer as returned by the API.
`,
  async run(ctx, argv) {
    const args = parseCommand(ctx, this, argv, { json: { type: "boolean" } });
    if (!args) return ExitCode.ok;
    const [id = ""] = positionals(this, args.positionals, ["id"]);
    const reply = await apiOf(ctx).call(HttpApi.readDiff, { params: { id } });
    if (args.flags.json) {
      await write(ctx.io.stdout, json(reply));
      return ExitCode.ok;
    }
    let text = "";
    for (const repo of reply.repos) {
      text += `# repo ${repo.path}${repo.error ? ` (${repo.error})` : ""}\n${repo.diff}`;
      if (repo.diff !== "" && !repo.diff.endsWith("\n")) text += "\n";
      if (repo.truncated) text += `# … diff of ${repo.path} cut at ${formatBytes(Buffer.byteLength(repo.diff))}\n`;
    }
    if (reply.repos.length === 0) text = "# no git repositories in the workspace\n";
    if (reply.truncated) text += "# … more repositories were left out\n";
    await write(ctx.io.stdout, text);
    return ExitCode.ok;
  },
};
