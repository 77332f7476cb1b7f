import { createHash } from "node:crypto";
import {
  IMAGE_CAPABILITY,
  InvalidError,
  NO_REQUIREMENTS,
  type BootEnvironment,
  type CreateSessionBody,
  type Environment,
  type PortableSpec,
  type Requirements,
} from "@paddock/contracts";

/** The most egress hosts a resolved spec may carry (PortableSpec's own bound). */
export const MAX_EGRESS_HOSTS = 256;

/** The identity of an environment's build inputs: sha256 of image, NUL, setup. */
export function setupHashOf(env: { image?: string | undefined; setup?: string | undefined }): string {
  return createHash("sha256")
    .update(`${env.image ?? ""}\0${env.setup ?? ""}`)
    .digest("hex");
}

/** `base` extended by `extra`, in order, without duplicates; never removes from `base`. */
export function extendHosts(base: readonly string[], extra: readonly string[]): string[] {
  const seen = new Set<string>();
  const out: string[] = [];
  for (const host of [...base, ...extra]) {
    if (seen.has(host)) continue;
    seen.add(host);
    out.push(host);
  }
  return out;
}

/**
 * Whether a session's spec chose an image other than its environment's. The
 * same image named explicitly is no override: a snapshot built from it still
 * fits. Works on the session's own spec and on an already layered one alike.
 */
export function overridesImage(env: Environment, spec: PortableSpec): boolean {
  return spec.image !== undefined && spec.image !== env.image;
}

/**
 * Layers a session's own spec over its environment (PortableSpec rules):
 * - image: set overrides; unset inherits the environment's (or stays unset: the host default);
 * - cmd, apps: the session's own (an environment carries no command);
 * - egressAllow: the environment's list extended by the session's, in order,
 *   without duplicates; never removes a host the environment needs;
 * - repos: the create body's `repos` overrides: undefined inherits (the
 *   environment declares no repos of its own, so the spec's stand), [] clones
 *   nothing, a list clones exactly these in order.
 * No environment is a scratch session: the spec stands as given.
 */
export function layerSpec(env: Environment | undefined, spec: PortableSpec, repos: CreateSessionBody["repos"]): PortableSpec {
  const out: PortableSpec = { ...spec };
  if (env?.image !== undefined && spec.image === undefined) out.image = env.image;
  if (env !== undefined || spec.egressAllow !== undefined) {
    const hosts = extendHosts(env?.egressAllow ?? [], spec.egressAllow ?? []);
    if (hosts.length > MAX_EGRESS_HOSTS) {
      throw new InvalidError(`spec.egressAllow: the environment's and the session's hosts together exceed ${MAX_EGRESS_HOSTS}`);
    }
    out.egressAllow = hosts;
  }
  if (repos !== undefined) out.repos = [...repos];
  return out;
}

/**
 * What a runner needs of the environment to boot a session from it. The
 * snapshot is offered only while it is valid (built for the current
 * setupHash) and the session boots the environment's own image.
 */
export function bootEnvironmentOf(env: Environment, spec: PortableSpec): BootEnvironment {
  const snapshotValid = env.snapshot !== undefined && env.snapshotHash === env.setupHash && !overridesImage(env, spec);
  return {
    environmentId: env.id,
    setupHash: env.setupHash,
    ...(env.setup !== undefined ? { setup: env.setup } : {}),
    ...(env.setupTimeoutSec !== undefined ? { setupTimeoutSec: env.setupTimeoutSec } : {}),
    ...(env.init !== undefined ? { init: env.init } : {}),
    ...(env.initTimeoutSec !== undefined ? { initTimeoutSec: env.initTimeoutSec } : {}),
    ...(snapshotValid && env.snapshot ? { snapshot: env.snapshot } : {}),
    secretRefs: [...env.secretRefs],
  };
}

/**
 * The portable sizing a session asks of its pool: its environment's, or none
 * for a scratch session; a spec naming an image also requires a runner that
 * can root a session in it (never the host's root instead).
 */
export function requirementsOf(env: Environment | undefined, spec?: PortableSpec): Requirements {
  const r = env?.requirements ?? NO_REQUIREMENTS;
  const image = spec?.image !== undefined && !r.capabilities.includes(IMAGE_CAPABILITY) ? [IMAGE_CAPABILITY] : [];
  return { ...r, capabilities: [...r.capabilities, ...image] };
}
