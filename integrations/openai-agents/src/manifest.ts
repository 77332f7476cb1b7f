/**
 * A manifest's entries as Paddock calls. Everything is checked before the
 * session is created, so an entry Paddock cannot materialise fails the
 * create with the framework's unsupported error instead of leaving half a
 * workspace: `file` and `dir` entries are written through the files API,
 * `git_repo` entries become the session's `spec.repos` (cloned by the runner
 * before the session runs, with Paddock's secretRef-based credentials), and
 * host-side entries (`local_file`, `local_dir`) and mounts are refused.
 */
import type { Entry, Manifest } from "@openai/agents/sandbox";
import type { CreateSessionInput } from "@paddock/sdk";
import { unsupported } from "./errors.ts";
import { workspaceRelative } from "./paths.ts";

export type RepoRef = NonNullable<CreateSessionInput["repos"]>[number];

export interface MaterializationPlan {
  /** Workspace-relative directories to create (parents first). */
  readonly dirs: string[];
  readonly files: { readonly path: string; readonly content: string | Uint8Array }[];
  /** Repositories the runner clones at create. */
  readonly repos: RepoRef[];
}

/** Refuses manifest-wide features Paddock has no counterpart for. */
export function assertManifestSupported(manifest: Manifest): void {
  if (manifest.users.length > 0 || manifest.groups.length > 0) {
    throw unsupported("manifest.users", "sandbox users and groups are not supported: commands run as the session's own user.");
  }
  if (manifest.extraPathGrants.length > 0) {
    throw unsupported("manifest.extraPathGrants", "path grants are not supported: the files API reaches the workspace only.");
  }
}

/** The git URL of a git_repo entry (URL-like values as given, `owner/name` on its host over https). */
function repoUrl(entry: Extract<Entry, { type: "git_repo" }>): string {
  if (entry.repo.includes("://") || entry.repo.startsWith("git@")) return entry.repo;
  return `https://${entry.host ?? "github.com"}/${entry.repo}.git`;
}

function planEntry(path: string, entry: Entry, reposAllowed: boolean, plan: MaterializationPlan): void {
  if (entry.permissions !== undefined || entry.group !== undefined) {
    throw unsupported("manifest.entry.permissions", `entry "${path}" sets permissions or a group: Paddock writes files with the session user's defaults.`, { path });
  }
  switch (entry.type) {
    case "file":
      plan.files.push({ path, content: entry.content });
      return;
    case "dir":
      plan.dirs.push(path);
      for (const [name, child] of Object.entries(entry.children ?? {})) planEntry(`${path}/${workspaceRelative("/", name)}`, child, reposAllowed, plan);
      return;
    case "git_repo":
      if (!reposAllowed) throw unsupported("manifest.git_repo.live", `git_repo "${path}": repositories are cloned at create (spec.repos), not into a running session.`, { path });
      if (entry.subpath !== undefined) throw unsupported("manifest.git_repo.subpath", `git_repo "${path}": subpath is not supported (Paddock clones whole repositories).`, { path });
      plan.repos.push({ url: repoUrl(entry), path, ...(entry.ref !== undefined ? { ref: entry.ref } : {}) });
      return;
    case "local_file":
    case "local_dir":
      throw unsupported(`manifest.${entry.type}`, `${entry.type} "${path}" reads the host's files: pass their content as file entries instead.`, { path });
    default:
      throw unsupported(`manifest.${entry.type}`, `${entry.type} entries (mounts) are not supported.`, { path });
  }
}

/** What creating `entries` takes; throws the framework's unsupported error for any entry Paddock cannot materialise. */
export function planEntries(entries: Record<string, Entry>, opts: { reposAllowed: boolean }): MaterializationPlan {
  const plan: MaterializationPlan = { dirs: [], files: [], repos: [] };
  for (const [name, entry] of Object.entries(entries)) planEntry(workspaceRelative("/", name), entry, opts.reposAllowed, plan);
  return plan;
}

export interface MaterializeIo {
  mkdirs(paths: readonly string[]): Promise<void>;
  write(path: string, content: string | Uint8Array): Promise<void>;
}

/** Writes a plan's directories, then its files (the files API creates missing parents too). */
export async function materialize(plan: MaterializationPlan, io: MaterializeIo): Promise<void> {
  if (plan.dirs.length > 0) await io.mkdirs(plan.dirs);
  for (const f of plan.files) await io.write(f.path, f.content);
}
