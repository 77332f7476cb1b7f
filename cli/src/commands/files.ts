import { createReadStream } from "node:fs";
import { stat } from "node:fs/promises";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import type { ReadableStream as NodeWebReadableStream } from "node:stream/web";
import { FileWriteReply, HttpApi, WorkspacePath } from "@paddock/contracts";
import { apiOf, commandGroup, parseCommand, positionals, type Command } from "../command.ts";
import { json } from "../format.ts";
import { ApiError, ExitCode, UsageError, write } from "../io.ts";
import { parseRemote, type RemoteRef } from "./workspace.ts";
import { watchSubcommand } from "./files-watch.ts";

/** `ID:PATH` naming something in the workspace (not the workspace itself unless allowed), or a UsageError. */
function remoteOf(cmd: string, arg: string, opts: { root: boolean }): RemoteRef {
  const ref = parseRemote(arg.includes(":") ? arg : `${arg}:`);
  if (!ref) throw new UsageError(`paddock files ${cmd}: expected ID:PATH, got ${JSON.stringify(arg)}`);
  const parsed = WorkspacePath.safeParse(ref.path);
  if (!parsed.success) throw new UsageError(`paddock files ${cmd}: ${arg}: ${parsed.error.issues[0]?.message ?? "invalid path"}`);
  if (!opts.root && ref.path.split("/").every((s) => s === "" || s === ".")) throw new UsageError(`paddock files ${cmd}: ${arg}: name a file in the workspace`);
  return ref;
}

const lsSub: Command = {
  name: "files ls",
  summary: "list a directory of a session's workspace",
  help: `usage: paddock files ls ID[:PATH] [--depth N] [--json]

Lists PATH (the workspace by default), N levels deep (1 by default): type,
mode, size and path of each entry, in name order. Symlinks are listed, never
followed. --json prints the answer as returned by the API.
`,
  async run(ctx, argv) {
    const args = parseCommand(ctx, this, argv, { depth: { type: "string" }, json: { type: "boolean" } });
    if (!args) return ExitCode.ok;
    const [target = ""] = positionals(this, args.positionals, ["id[:path]"]);
    const ref = remoteOf("ls", target, { root: true });
    const depth = args.flags.depth;
    if (depth !== undefined && !/^\d{1,2}$/.test(depth)) throw new UsageError(`paddock files ls: --depth must be a number from 1 to 64, got ${JSON.stringify(depth)}`);
    const reply = await apiOf(ctx).call(HttpApi.listFiles, { params: { id: ref.sessionId }, query: { path: ref.path, ...(depth !== undefined ? { depth } : {}) } });
    if (args.flags.json) {
      await write(ctx.io.stdout, json(reply));
      return ExitCode.ok;
    }
    const lines = reply.entries.map((e) => `${e.type.padEnd(7)} ${e.mode.toString(8).padStart(4, "0")} ${String(e.size).padStart(12)}  ${e.path}${e.type === "dir" ? "/" : ""}`);
    if (reply.truncated) lines.push("# … more entries were left out");
    await write(ctx.io.stdout, lines.length ? `${lines.join("\n")}\n` : "");
    return ExitCode.ok;
  },
};

const catSub: Command = {
  name: "files cat",
  summary: "print a file of a session's workspace",
  help: `usage: paddock files cat ID:PATH

Writes the file's bytes, unchanged, to stdout.
`,
  async run(ctx, argv) {
    const args = parseCommand(ctx, this, argv, {});
    if (!args) return ExitCode.ok;
    const [target = ""] = positionals(this, args.positionals, ["id:path"]);
    const ref = remoteOf("cat", target, { root: false });
    const res = await apiOf(ctx).open(HttpApi.readFile, { params: { id: ref.sessionId }, query: { path: ref.path } });
    if (!res.body) throw new ApiError("internal", "the gateway answered no bytes");
    await pipeline(Readable.fromWeb(res.body as NodeWebReadableStream<Uint8Array>), ctx.io.stdout, { end: false });
    return ExitCode.ok;
  },
};

const putSub: Command = {
  name: "files put",
  summary: "write a file of a session's workspace from a local file or stdin",
  help: `usage: paddock files put ID:PATH [LOCAL|-] [--mode 644]

Writes LOCAL (or stdin, when LOCAL is - or left out) as the file PATH of the
workspace, its missing directories made, with permission bits --mode (octal,
644 by default). A file or link already at PATH is replaced.
`,
  async run(ctx, argv) {
    const args = parseCommand(ctx, this, argv, { mode: { type: "string" } });
    if (!args) return ExitCode.ok;
    if (args.positionals.length === 0 || args.positionals.length > 2) positionals(this, args.positionals, ["id:path", "local"]);
    const [target = "", local = "-"] = args.positionals;
    const ref = remoteOf("put", target, { root: false });
    const mode = args.flags.mode;
    if (mode !== undefined && !/^0?[0-7]{3}$/.test(mode)) throw new UsageError(`paddock files put: --mode must be octal permission bits such as 644, got ${JSON.stringify(mode)}`);
    let source: Readable;
    if (local === "-") source = ctx.io.stdin;
    else {
      const st = await stat(local).catch(() => undefined);
      if (!st?.isFile()) throw new ApiError("not_found", `${local}: no such file`);
      source = createReadStream(local);
    }
    const res = await apiOf(ctx).uploadTo(HttpApi.writeFile, { params: { id: ref.sessionId }, query: { path: ref.path, ...(mode !== undefined ? { mode } : {}) } }, Readable.toWeb(source) as ReadableStream<Uint8Array>);
    const reply = FileWriteReply.safeParse(await res.json());
    if (!reply.success) throw new ApiError("internal", "unexpected answer to the write");
    await write(ctx.io.stderr, `wrote ${reply.data.size} bytes to ${ref.sessionId}:${reply.data.path}\n`);
    return ExitCode.ok;
  },
};

const rmSub: Command = {
  name: "files rm",
  summary: "remove a file, link or directory of a session's workspace",
  help: `usage: paddock files rm ID:PATH [-r]

Removes a file or a link (never what it points at), an empty directory, or
with -r a directory and everything in it.
`,
  async run(ctx, argv) {
    const args = parseCommand(ctx, this, argv, { recursive: { type: "boolean", short: "r" } });
    if (!args) return ExitCode.ok;
    const [target = ""] = positionals(this, args.positionals, ["id:path"]);
    const ref = remoteOf("rm", target, { root: false });
    await apiOf(ctx).call(HttpApi.deleteFile, { params: { id: ref.sessionId }, query: { path: ref.path, ...(args.flags.recursive ? { recursive: "true" } : {}) } });
    return ExitCode.ok;
  },
};

const subcommands: readonly Command[] = [lsSub, catSub, putSub, rmSub, watchSubcommand(remoteOf)];

export const filesCommand: Command = commandGroup({
  name: "files",
  summary: "read, write, list, remove and watch files of a session (ls, cat, put, rm, watch)",
  subcommands,
});
