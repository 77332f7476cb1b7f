// An image config's runtime part (Env, Entrypoint, Cmd) as the sandbox takes
// it. Env entries are KEY=VALUE strings, later ones winning as in docker; an
// entry without `=` is skipped (docker passes the host's value through, and a
// runner has none to give). PADDOCK_ variables are Paddock's own: an image
// cannot preset one (a stale PADDOCK_URL, a forged PADDOCK_TOKEN) that the
// runner leaves unset for a session without them.
import { AppSpec } from "@paddock/contracts";
import type { ImageConfig } from "@paddock/oci";
import { ImageError, ImageErrorCode } from "./errors.ts";

export interface RunConfig {
  env: Record<string, string>;
  command?: string[];
}

const ENV_NAME = /^[^=\0]+$/;

/** The config's Env as variables; refuses NUL (no process could be given it). */
export function imageEnv(entries: readonly string[]): Record<string, string> {
  const env: Record<string, string> = {};
  for (const entry of entries) {
    const eq = entry.indexOf("=");
    if (eq <= 0) continue;
    const name = entry.slice(0, eq);
    const value = entry.slice(eq + 1);
    if (!ENV_NAME.test(name) || value.includes("\0")) throw new ImageError(ImageErrorCode.unsupported, "image config: an Env entry holds NUL");
    if (name.startsWith("PADDOCK_")) continue;
    env[name] = value;
  }
  return env;
}

/** What a session rooted in the image runs with; refuses a command no app could have (AppSpec's bounds, NUL). */
export function runConfigOf(config: ImageConfig): RunConfig {
  const c = config.config;
  const env = imageEnv(c?.Env ?? []);
  const command = [...(c?.Entrypoint ?? []), ...(c?.Cmd ?? [])];
  if (command.length === 0) return { env };
  if (!AppSpec.shape.cmd.safeParse(command).success || command.some((arg) => arg.includes("\0"))) {
    throw new ImageError(ImageErrorCode.unsupported, "image config: Entrypoint and Cmd are not a command a session can run");
  }
  return { env, command };
}
