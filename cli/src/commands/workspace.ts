import { HttpApi, Id } from "@paddock/contracts";
import { apiOf, parseCommand, positionals, type Command } from "../command.ts";
import { json } from "../format.ts";
import { ExitCode, write } from "../io.ts";
import { formatBytes } from "../progress.ts";

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
