/**
 * `paddock files watch ID[:PATH]`: one line per change frame of
 * GET /v1/sessions/:id/files/watch, until the watch ends or Ctrl-C.
 */
import WebSocket from "ws";
import { CLOSE_ENDED, fillPath, FileWatchFrame, HttpApi } from "@paddock/contracts";
import { apiOf, parseCommand, positionals, type Command } from "../command.ts";
import { errorFromText, unreachable } from "../http.ts";
import { ApiError, ExitCode, write } from "../io.ts";
import type { RemoteRef } from "./workspace.ts";

/** One frame as the line the user sees: `<kind> <path>`, or the overflow notice. */
export function watchLine(frame: FileWatchFrame): string {
  if (frame.type === "overflow") return "# overflow: changes were dropped; list the path again to resync";
  return `${frame.kind.padEnd(6)} ${frame.path}`;
}

export function watchSubcommand(remoteOf: (cmd: string, arg: string, opts: { root: boolean }) => RemoteRef): Command {
  return {
    name: "files watch",
    summary: "print changes to a session's workspace as they happen",
    help: `usage: paddock files watch ID[:PATH] [--json]

Prints one line per change under PATH (the workspace by default; a directory
with everything under it, or one file): "create", "modify" or "delete" and
the path relative to the workspace, until the watched path or the session
goes away, or Ctrl-C. A line "# overflow" means changes were dropped (too many
at once): list the path again to resync. --json prints each frame as sent.
`,
    async run(ctx, argv) {
      const args = parseCommand(ctx, this, argv, { json: { type: "boolean" } });
      if (!args) return ExitCode.ok;
      const [target = ""] = positionals(this, args.positionals, ["id[:path]"]);
      const ref = remoteOf("watch", target, { root: true });
      const client = apiOf(ctx);
      const url = client.url(fillPath(HttpApi.watchFiles.path, { id: ref.sessionId }), ref.path === "" ? {} : { path: ref.path });
      url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
      const ws = new WebSocket(url, { headers: { authorization: client.authHeader } });
      const stop = () => ws.close(1000);
      ctx.io.signals?.on("SIGINT", stop);
      let lines = Promise.resolve();
      try {
        await new Promise<void>((resolve, reject) => {
          ws.on("unexpected-response", (_req, res) => {
            const chunks: Buffer[] = [];
            res.on("data", (c: Buffer) => chunks.push(c));
            res.on("end", () => reject(errorFromText(res.statusCode ?? 0, Buffer.concat(chunks).toString("utf8"))));
            res.on("error", reject);
          });
          ws.on("error", (err) => reject(unreachable(client.baseUrl, err)));
          ws.on("message", (data: Buffer) => {
            const parsed = FileWatchFrame.safeParse(JSON.parse(data.toString("utf8")));
            if (!parsed.success) return;
            const line = `${args.flags.json ? JSON.stringify(parsed.data) : watchLine(parsed.data)}\n`;
            lines = lines.then(() => write(ctx.io.stdout, line));
          });
          ws.on("close", (code, reason) => {
            // 1000/1005: we closed (Ctrl-C); 4000: the watched path or session went away. Anything else is an error.
            if (code === 1000 || code === 1005 || code === CLOSE_ENDED) resolve();
            else reject(new ApiError("unavailable", `watch closed with code ${String(code)}${reason.length ? `: ${reason.toString("utf8")}` : ""}`));
          });
        });
      } finally {
        ctx.io.signals?.off("SIGINT", stop);
        await lines;
      }
      return ExitCode.ok;
    },
  };
}
