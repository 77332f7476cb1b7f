import { describeZodError, HttpApi } from "@paddock/contracts";
import { apiOf, parseCommand, positionals, type Command } from "../command.ts";
import { agentsTable, json, keyValues } from "../format.ts";
import { ApiError, ExitCode, UsageError, write } from "../io.ts";

export const agentsCommand: Command = {
  name: "agents",
  summary: "list a session's agents, or find the one owning a process",
  help: `usage: paddock agents ID [--json]
       paddock agents ID --resolve PID [--pid-namespace NS] [--json]

Lists the agents declared inside session ID, oldest first: each one's state
(live, gone or parked, judged when read), pid, runtime, model, turn (ready,
busy or done, and how many it started), tokens reported, and its lineage
(the parked agent it resumed, the successor that resumed it).
  --resolve PID         print the agent owning process PID (a pid as the
                        sandbox sees it): the process itself or its nearest
                        declared ancestor. Exits 1 when no agent owns it.
  --pid-namespace NS    with --resolve: the pid namespace PID is in, as an
                        inode or as readlink /proc/PID/ns/pid prints it
                        ("pid:[4026532301]"); needed when the pid exists in
                        several of the session's namespaces
  --json                print the API's JSON: {"agents": [...]}, or the one
                        agent with --resolve
`,
  async run(ctx, argv) {
    const args = parseCommand(ctx, this, argv, {
      resolve: { type: "string" },
      "pid-namespace": { type: "string" },
      json: { type: "boolean" },
    });
    if (!args) return ExitCode.ok;
    const [id = ""] = positionals(this, args.positionals, ["id"]);
    const pid = args.flags.resolve;
    const pidNamespace = args.flags["pid-namespace"];
    if (pid === undefined) {
      if (pidNamespace !== undefined) throw new UsageError(`paddock ${this.name}: --pid-namespace goes with --resolve PID`);
      const list = await apiOf(ctx).call(HttpApi.listAgents, { params: { id } });
      await write(ctx.io.stdout, args.flags.json ? json(list) : agentsTable(list.agents));
      return ExitCode.ok;
    }
    // The route's own query schema judges PID and NS: a malformed one is a usage error, and nothing is asked.
    const query = { pid, ...(pidNamespace !== undefined ? { pidNamespace } : {}) };
    const checked = HttpApi.resolveAgent.query.safeParse(query);
    if (!checked.success) throw new UsageError(`paddock ${this.name}: --resolve ${JSON.stringify(pid)}${pidNamespace !== undefined ? ` --pid-namespace ${JSON.stringify(pidNamespace)}` : ""}: ${describeZodError(checked.error)}`);
    try {
      const agent = await apiOf(ctx).call(HttpApi.resolveAgent, { params: { id }, query });
      await write(ctx.io.stdout, args.flags.json ? json(agent) : keyValues(agent));
      return ExitCode.ok;
    } catch (err) {
      if (!(err instanceof ApiError) || err.code !== "not_found") throw err;
      ctx.io.stderr.write(`error: not_found: no agent owns process ${pid} in session ${id} (${err.message})\n`);
      return ExitCode.failure;
    }
  },
};
