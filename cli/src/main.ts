import { realpathSync } from "node:fs";
import { fileURLToPath } from "node:url";
import type { Command, Ctx } from "./command.ts";
import { attachCommand, logsCommand, runCommand } from "./commands/terminal.ts";
import { envCommand } from "./commands/environments.ts";
import { createCommand, recycleCommand, restartCommand, resumeCommand, snapshotCommand, suspendCommand } from "./commands/lifecycle.ts";
import { eventsCommand, getCommand, lsCommand, rmCommand } from "./commands/records.ts";
import { runnerCommand, runnersCommand } from "./commands/runners.ts";
import { tokenCommand } from "./commands/tokens.ts";
import { memberCommand, workspaceCommand } from "./commands/members.ts";
import { loginCommand } from "./commands/login.ts";
import { diffCommand } from "./commands/workspace.ts";
import { cpCommand } from "./commands/cp.ts";
import { execCommand } from "./commands/exec.ts";
import { filesCommand } from "./commands/files.ts";
import { agentsCommand } from "./commands/agents.ts";
import { loadCliConfig } from "./config.ts";
import { ApiError, ExitCode, UsageError, type CliIo } from "./io.ts";

export const commands: readonly Command[] = [
  runCommand,
  createCommand,
  attachCommand,
  logsCommand,
  lsCommand,
  getCommand,
  rmCommand,
  suspendCommand,
  resumeCommand,
  snapshotCommand,
  recycleCommand,
  restartCommand,
  envCommand,
  runnersCommand,
  runnerCommand,
  eventsCommand,
  execCommand,
  cpCommand,
  filesCommand,
  diffCommand,
  agentsCommand,
  loginCommand,
  tokenCommand,
  workspaceCommand,
  memberCommand,
];

export function topHelp(): string {
  const width = Math.max(...commands.map((c) => c.name.length));
  return `usage: paddock [--url URL] [--token TOKEN] COMMAND [ARGS...]

Commands:
${commands.map((c) => `  ${c.name.padEnd(width)}  ${c.summary}`).join("\n")}

Global flags (anywhere before --):
  --url URL       the gateway (default: $PADDOCK_URL, else http://127.0.0.1:8080)
  --token TOKEN   the API token (default: $PADDOCK_TOKEN, else the one 'paddock login' kept)

Run 'paddock COMMAND --help' for a command's flags.
`;
}

/**
 * Runs one CLI invocation. Resolves with the exit code: 0 ok, 1 failure (an
 * API error, a failed command), 2 usage; `run` and `attach` exit with the
 * app's own code.
 */
export async function main(argv: readonly string[], io: CliIo): Promise<number> {
  try {
    const config = loadCliConfig(argv, io.env);
    const [name, ...rest] = config.argv;
    if (name === undefined || name === "--help" || name === "-h" || name === "help") {
      const about = name === "help" ? commands.find((c) => c.name === rest[0]) : undefined;
      (name === undefined ? io.stderr : io.stdout).write(about ? about.help : topHelp());
      return name === undefined ? ExitCode.usage : ExitCode.ok;
    }
    const command = commands.find((c) => c.name === name);
    if (!command) throw new UsageError(`paddock: unknown command ${JSON.stringify(name)}`);
    const ctx: Ctx = { io, config };
    return await command.run(ctx, rest);
  } catch (err) {
    if (err instanceof UsageError) {
      io.stderr.write(`${err.message}\nRun 'paddock --help' for usage.\n`);
      return ExitCode.usage;
    }
    if (err instanceof ApiError) {
      io.stderr.write(`error: ${err.code}: ${err.message}\n`);
      return ExitCode.failure;
    }
    io.stderr.write(`error: internal: ${err instanceof Error ? err.message : String(err)}\n`);
    return ExitCode.failure;
  }
}

/** Runs main() against this process and exits with its code once output is flushed. */
export async function runProcess(): Promise<void> {
  // A closed pipe (`paddock logs ID | head`) ends the CLI quietly.
  process.stdout.on("error", (err: NodeJS.ErrnoException) => process.exit(err.code === "EPIPE" ? ExitCode.ok : ExitCode.failure));
  const code = await main(process.argv.slice(2), {
    stdin: process.stdin,
    stdout: process.stdout,
    stderr: process.stderr,
    env: process.env,
    signals: process,
  });
  // stdin may still be open (a controller forwarding it); exit rather than wait for EOF.
  process.stdout.write("", () => process.exit(code));
}

function isEntry(): boolean {
  const script = process.argv[1];
  if (!script) return false;
  try {
    return realpathSync(script) === realpathSync(fileURLToPath(import.meta.url));
  } catch {
    return false;
  }
}

if (isEntry()) await runProcess();
