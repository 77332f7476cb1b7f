/**
 * `paddock-runner join`: run once on a runner host (deploy/runner/README.md).
 *
 *   paddock-runner join --gateway URL --token TOKEN [--runner-id ID]
 *                       [--config /etc/paddock/runner.env] [--seed FILE]
 *
 * The token may also come from stdin (`--token -`), keeping it out of the
 * process list and shell history.
 */
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { joinFleet, JoinError } from "./join.ts";

const USAGE = "usage: paddock-runner join --gateway URL --token TOKEN|- [--runner-id ID] [--config FILE] [--seed FILE]\n";
const DEFAULT_CONFIG = "/etc/paddock/runner.env";

async function main(argv: string[]): Promise<number> {
  const [verb, ...rest] = argv;
  if (verb !== "join") {
    process.stderr.write(USAGE);
    return 2;
  }
  const { values } = parseArgs({
    args: rest,
    options: { gateway: { type: "string" }, token: { type: "string" }, "runner-id": { type: "string" }, config: { type: "string" }, seed: { type: "string" } },
    strict: true,
  });
  if (values.gateway === undefined || values.token === undefined) {
    process.stderr.write(USAGE);
    return 2;
  }
  const token = values.token === "-" ? readFileSync(0, "utf8").trim() : values.token;
  try {
    const joined = await joinFleet({ gatewayUrl: values.gateway, token, runnerId: values["runner-id"], configFile: values.config ?? DEFAULT_CONFIG, seedFile: values.seed });
    process.stdout.write(`joined as ${joined.runnerId} (pool ${joined.poolId}); config ${values.config ?? DEFAULT_CONFIG}, key ${joined.seedFile}\n`);
    return 0;
  } catch (err) {
    process.stderr.write(`paddock-runner join: ${err instanceof JoinError ? `${err.code}: ${err.message}` : String(err)}\n`);
    return 1;
  }
}

process.exitCode = await main(process.argv.slice(2));
