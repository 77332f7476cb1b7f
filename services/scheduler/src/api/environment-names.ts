import { createHash } from "node:crypto";
import { ConflictError } from "@paddock/contracts";
import { isWrongLastSequence } from "@paddock/bus";
import type { SchedulerContext } from "../context.ts";
import type { EnvironmentStore } from "../state/environment-store.ts";

// Environment names: unique within a workspace, reserved in KV `names`.
// Records are written first and names claimed after, so a name key that
// names a missing or renamed record is free to take over.

type NameCtx = Pick<SchedulerContext, "names">;

/**
 * `<ws>.env.name.<sha256(name)>`: four tokens, so it can never collide with a
 * session name key (`<ws>.<creator>.<hex>`, three tokens), and bounded in
 * length whatever the name (names are up to 128 characters of any script).
 */
export function envNameKey(workspaceId: string, name: string): string {
  return `${workspaceId}.env.name.${createHash("sha256").update(name).digest("hex")}`;
}

/** The id of the live environment that holds `name`, if another one does. */
async function otherHolder(ctx: NameCtx, envs: EnvironmentStore, ws: string, name: string, self: string): Promise<{ holder: string | undefined; revision: number } | undefined> {
  const entry = await ctx.names.get(envNameKey(ws, name));
  if (!entry || entry.operation !== "PUT") return undefined;
  const holder = entry.string();
  if (holder === self) return { holder: undefined, revision: entry.revision };
  const held = await envs.find(ws, holder);
  // A holder that is gone, or has since been renamed, no longer holds the name.
  const live = held !== undefined && held.value.name === name;
  return { holder: live ? holder : undefined, revision: entry.revision };
}

function nameTaken(name: string): ConflictError {
  return new ConflictError(`an environment named ${JSON.stringify(name)} already exists in this workspace`);
}

/** Fast path before any write: refuses a name a live environment holds. */
export async function assertNameFree(ctx: NameCtx, envs: EnvironmentStore, ws: string, name: string, self: string): Promise<void> {
  if ((await otherHolder(ctx, envs, ws, name, self))?.holder !== undefined) throw nameTaken(name);
}

/**
 * Claims `name` for `self`, whose record already carries the name (records
 * are written first, so a key naming a missing record names one that is gone
 * for good and may be taken over). Every claim is a create or a
 * compare-and-set on the key, even when `self` already holds it, so two
 * claimants racing for one name cannot both win.
 */
export async function claimName(ctx: NameCtx, envs: EnvironmentStore, ws: string, name: string, self: string): Promise<void> {
  const key = envNameKey(ws, name);
  for (let attempt = 0; attempt < 10; attempt++) {
    try {
      await ctx.names.create(key, self);
      return;
    } catch (err) {
      if (!isWrongLastSequence(err)) throw err;
    }
    const held = await otherHolder(ctx, envs, ws, name, self);
    if (!held) continue; // deleted in between: create again
    if (held.holder !== undefined) throw nameTaken(name);
    try {
      await ctx.names.update(key, self, held.revision);
      return;
    } catch (err) {
      if (!isWrongLastSequence(err)) throw err;
    }
  }
  throw new ConflictError(`name ${JSON.stringify(name)} is being claimed concurrently`);
}

/** Releases `name` if `self` still holds it; a lost race leaves it to its new holder. */
export async function releaseName(ctx: NameCtx, ws: string, name: string, self: string): Promise<void> {
  const key = envNameKey(ws, name);
  const entry = await ctx.names.get(key);
  if (!entry || entry.operation !== "PUT" || entry.string() !== self) return;
  try {
    await ctx.names.delete(key, { previousSeq: entry.revision });
  } catch (err) {
    if (!isWrongLastSequence(err)) throw err;
  }
}
