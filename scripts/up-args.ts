// `npm run up`'s command line, parsed by a pure function the tests call directly.
import { intFlag, parseScriptFlags, stringFlag, type ScriptArgs } from "@paddock/testing";

export interface UpArgs {
  /** The gateway's HTTP port; 0 picks a free one. */
  readonly httpPort: number;
  /** Where every piece of state lives (JetStream store, workspaces, logs, the dev token); relative to the cwd. */
  readonly dataDir: string;
  /** The nats-server client port; -1 picks a free one. */
  readonly natsPort: number;
  /** How many runner-agents to start. */
  readonly runners: number;
  /** Sessions each runner takes. */
  readonly capacity: number;
  /** How long a process may take to exit after SIGTERM (on Ctrl-C) before it is killed. */
  readonly stopGraceMs: number;
}

export const UP_USAGE = `usage: npm run up -- [--http-port N] [--data-dir DIR] [--nats-port N] [--runners N] [--capacity N] [--stop-grace-ms MS]

  --http-port N    the gateway's HTTP port (default 8080; 0 picks a free one)
  --data-dir DIR   all state: JetStream store, workspaces, logs, the dev token, keys and
                   NATS credentials (default .data; made private, mode 0700)
  --nats-port N    the nats-server client port (default: a free one)
  --runners N      runner-agents to start, 1 to 64 (default 1)
  --capacity N     sessions per runner, 1 to 1024 (default 8)
  --stop-grace-ms MS
                   on Ctrl-C, how long a process may take to stop before it is
                   killed, 0 to 600000 (default 15000: past a runner's own
                   bound on its stop, its kill grace + 5 s)
  -h, --help       this text`;

const SPEC = {
  "http-port": { type: "string" },
  "data-dir": { type: "string" },
  "nats-port": { type: "string" },
  runners: { type: "string" },
  capacity: { type: "string" },
  "stop-grace-ms": { type: "string" },
} as const;

export function parseUpArgs(argv: readonly string[]): ScriptArgs<UpArgs> {
  const parsed = parseScriptFlags("up", argv, SPEC);
  if (parsed.help) return parsed;
  const flags = parsed.values;
  return {
    help: false,
    values: {
      httpPort: intFlag("up", flags, "http-port", { min: 0, max: 65_535 }, 8080),
      dataDir: stringFlag("up", flags, "data-dir", ".data"),
      natsPort: intFlag("up", flags, "nats-port", { min: -1, max: 65_535 }, -1),
      runners: intFlag("up", flags, "runners", { min: 1, max: 64 }, 1),
      capacity: intFlag("up", flags, "capacity", { min: 1, max: 1_024 }, 8),
      stopGraceMs: intFlag("up", flags, "stop-grace-ms", { min: 0, max: 600_000 }, 15_000),
    },
  };
}

/**
 * Where `up`'s gateway serves previews by host (docs/ports.md): the caller's
 * PADDOCK_PREVIEW_ORIGIN as given, else `http://preview.localhost:<port>`
 * (browsers send `*.localhost` to the loopback), none on a port not known
 * before the gateway starts (0).
 */
export function upPreviewOrigin(httpPort: number, env: Readonly<Record<string, string | undefined>>): Record<string, string> {
  if (env.PADDOCK_PREVIEW_ORIGIN !== undefined) return { PADDOCK_PREVIEW_ORIGIN: env.PADDOCK_PREVIEW_ORIGIN };
  return httpPort > 0 ? { PADDOCK_PREVIEW_ORIGIN: `http://preview.localhost:${httpPort}` } : {};
}
