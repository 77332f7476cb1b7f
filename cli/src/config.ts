import { extractGlobalFlags } from "./args.ts";
import { configDirOf, storedToken } from "./credentials.ts";
import { UsageError, type CliEnv } from "./io.ts";

export const DEFAULT_URL = "http://127.0.0.1:8080";

/** Where the gateway is and who we are; `token` is checked only by commands that call the API. */
export interface CliConfig {
  url: string;
  token: string | undefined;
  /** Where the CLI keeps its files (`paddock login`'s token); undefined without a home. */
  configDir: string | undefined;
  /** argv without --url/--token. */
  argv: string[];
}

/**
 * The one place the CLI reads its environment: flags `--url`/`--token` win
 * over `PADDOCK_URL`/`PADDOCK_TOKEN`, which win over the token `paddock login`
 * stored for this gateway (credentials.ts).
 */
export function loadCliConfig(argv: readonly string[], env: CliEnv): CliConfig {
  const globals = extractGlobalFlags(argv);
  const url = nonEmpty(globals.url) ?? nonEmpty(env.PADDOCK_URL) ?? DEFAULT_URL;
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new UsageError(`paddock: invalid gateway URL ${JSON.stringify(url)}`);
  }
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:") {
    throw new UsageError(`paddock: gateway URL must be http:// or https://, got ${JSON.stringify(url)}`);
  }
  const base = url.replace(/\/+$/, "");
  const configDir = configDirOf(env);
  return {
    url: base,
    token: nonEmpty(globals.token) ?? nonEmpty(env.PADDOCK_TOKEN) ?? storedToken(configDir, base, Date.now())?.token,
    configDir,
    argv: globals.rest,
  };
}

/** The token, or the usage error every API command gives without one. */
export function requireToken(config: CliConfig): string {
  if (config.token === undefined) {
    throw new UsageError("paddock: no API token: run 'paddock login', pass --token TOKEN or set PADDOCK_TOKEN");
  }
  return config.token;
}

function nonEmpty(v: string | undefined): string | undefined {
  return v === undefined || v === "" ? undefined : v;
}
