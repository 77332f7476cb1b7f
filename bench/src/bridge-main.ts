// The direct bridge as its own OS process, as ttyd runs: `node --import tsx
// bench/src/bridge-main.ts '<cmd as JSON>'`. Prints its URL as one line, then
// serves until its stdin closes (the bench ended, or died) or SIGTERM.
import { startBridge } from "./baselines.ts";

const cmd = JSON.parse(process.argv[2] ?? "[]") as unknown;
if (!Array.isArray(cmd) || cmd.length === 0 || !cmd.every((c) => typeof c === "string")) {
  process.stderr.write("bridge-main: expected the command as a JSON array of strings\n");
  process.exit(2);
}
const bridge = await startBridge(cmd as string[]);
process.stdout.write(`${bridge.url}\n`);
const stop = () => void bridge.close().then(() => process.exit(0));
process.stdin.on("end", stop);
process.stdin.on("error", stop);
process.stdin.resume();
process.on("SIGTERM", stop);
