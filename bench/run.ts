// `pnpm bench [--quick] [--only lifecycle,checkpoint,terminal,memory,images,sandbox,files,exec,preview,console,webhooks,build]`: every speed figure
// next to a baseline measured in the same run, and their ratio; JSON under bench-results/.
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseScriptArgsOrExit, repoRoot } from "@paddock/testing";
import { BENCH_USAGE, parseBenchArgs } from "./src/args.ts";
import { checkpointBench } from "./src/checkpoint.ts";
import { incrementalCheckpointBench } from "./src/checkpoint-incremental.ts";
import { filesBench } from "./src/files.ts";
import { execBench } from "./src/exec.ts";
import { previewBench } from "./src/preview.ts";
import { imagesBench } from "./src/images.ts";
import { removeLeftovers } from "./src/leftovers.ts";
import { lifecycleBench } from "./src/lifecycle.ts";
import { scaleBench } from "./src/scale.ts";
import { formatTable, type Figure } from "./src/stats.ts";
import { memoryBenches } from "./src/memory.ts";
import { sandboxBenches } from "./src/sandbox.ts";
import { sandboxRunnerBenches } from "./src/sandbox-runner.ts";
import { terminalBenches } from "./src/terminal.ts";
import { terminalWorkloadsBench } from "./src/terminal-workloads.ts";
import { consoleBench } from "./src/console.ts";
import { webhooksBench } from "./src/webhooks.ts";
import { buildBench } from "./src/build.ts";

const { quick, only } = parseScriptArgsOrExit(BENCH_USAGE, parseBenchArgs);

async function main(): Promise<void> {
  const figures: Figure[] = [];
  if (only.has("lifecycle")) figures.push(...(await lifecycleBench(quick ? { sessions: 500, runners: 20 } : { sessions: 10_000, runners: 500 })));
  if (only.has("lifecycle")) figures.push(...(await scaleBench(quick ? { stages: [500, 2_000], runners: 100, pages: 100 } : { stages: [10_000, 100_000], runners: 5_000, pages: 500 })));
  if (only.has("checkpoint")) {
    figures.push(...(await checkpointBench({ megabytes: quick ? 10 : 100 })));
    // The whole-tar checkpoints every checkpoint used to be: the first manifest checkpoint is no slower.
    figures.push(...(await checkpointBench({ megabytes: quick ? 10 : 100, format: "tar" })));
    figures.push(...(await incrementalCheckpointBench({ megabytes: quick ? 100 : 1024, changedPercent: 1 })));
  }
  if (only.has("terminal")) {
    figures.push(...(await terminalBenches(quick ? { latencySamples: 20, echoSamples: 100, megabytes: 5 } : { latencySamples: 200, echoSamples: 1000, megabytes: 200 })));
    figures.push(...(await terminalWorkloadsBench({ megabytes: quick ? 16 : 64 })));
  }
  if (only.has("memory")) figures.push(...(await memoryBenches(quick ? { clients: 100, idleSessions: 20 } : { clients: 1000, idleSessions: 200 })));
  if (only.has("images")) figures.push(...(await imagesBench(quick ? { megabytes: 48, samples: 2 } : { megabytes: 48, samples: 5 })));
  if (only.has("sandbox")) {
    figures.push(...(await sandboxBenches({ samples: quick ? 20 : 200 })));
    figures.push(...(await sandboxRunnerBenches(quick ? { samples: 20, echoSamples: 100, megabytes: 5 } : { samples: 200, echoSamples: 1000, megabytes: 100 })));
  }
  if (only.has("files")) figures.push(...(await filesBench({ samples: quick ? 20 : 200 })));
  if (only.has("preview")) figures.push(...(await previewBench(quick ? { samples: 20, megabytes: 20 } : { samples: 200, megabytes: 100 })));
  if (only.has("exec")) figures.push(...(await execBench(quick ? { samples: 20, megabytes: 20, repoMegabytes: 10 } : { samples: 200, megabytes: 100, repoMegabytes: 50 })));
  if (only.has("console")) figures.push(...(await consoleBench({ samples: quick ? 10 : 50 })));
  if (only.has("webhooks")) figures.push(...(await webhooksBench({ events: quick ? 30 : 300 })));
  if (only.has("build")) figures.push(...(await buildBench({ samples: quick ? 2 : 5 })));
  process.stdout.write(formatTable(figures) + "\n");
  const dir = join(repoRoot, "bench-results");
  mkdirSync(dir, { recursive: true });
  const file = join(dir, `bench-${quick ? "quick-" : ""}${new Date().toISOString().replace(/[:.]/g, "-")}.json`);
  writeFileSync(file, JSON.stringify({ quick, at: new Date().toISOString(), only: [...only], figures }, null, 2));
  process.stdout.write(`wrote ${file}\n`);
}

main()
  .finally(removeLeftovers)
  .then(
    () => process.exit(0),
    (err: unknown) => {
      process.stderr.write(`bench failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
      process.exit(1);
    },
  );
