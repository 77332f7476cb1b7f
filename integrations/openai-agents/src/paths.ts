/**
 * The framework names sandbox paths absolute (under the manifest root) or
 * relative to it; Paddock's files and exec routes take workspace-relative
 * paths without `..`. Resolving here, lexically, turns an escape (`../x`,
 * `/etc/passwd`) into the framework's own path error before any call; the
 * runner checks again (and refuses a path through a symlink).
 */
import { SandboxPathResolutionError } from "@openai/agents/sandbox";

/** A path's segments with `.` dropped and `..` applied; null when `..` climbs above the start. */
function normalizedSegments(path: string): string[] | null {
  const out: string[] = [];
  for (const seg of path.split("/")) {
    if (seg === "" || seg === ".") continue;
    if (seg === "..") {
      if (out.length === 0) return null;
      out.pop();
    } else out.push(seg);
  }
  return out;
}

function escapes(path: string, root: string): SandboxPathResolutionError {
  return new SandboxPathResolutionError(`Sandbox path "${path}" escapes the workspace root ${root}.`, { provider: "paddock", path, root });
}

/** `path` (absolute under `root`, or relative to it) as a workspace-relative path: "" is the workspace itself. */
export function workspaceRelative(root: string, path: string | undefined): string {
  if (path === undefined || path === "") return "";
  if (/[\\\0]/.test(path)) throw new SandboxPathResolutionError(`Sandbox path "${path}" holds a backslash or NUL.`, { provider: "paddock", path });
  const rootSegs = normalizedSegments(root) ?? [];
  if (path.startsWith("/")) {
    const segs = normalizedSegments(path) ?? [];
    if (segs.length < rootSegs.length || rootSegs.some((s, i) => segs[i] !== s)) throw escapes(path, root);
    return segs.slice(rootSegs.length).join("/");
  }
  const segs = normalizedSegments(path);
  if (segs === null) throw escapes(path, root);
  return segs.join("/");
}

/** A workspace-relative path as the sandbox sees it (under the root). */
export function absoluteOf(root: string, relative: string): string {
  const base = root.replace(/\/+$/, "");
  return relative === "" ? base || "/" : `${base}/${relative}`;
}

/** The last segment of a workspace-relative path. */
export function baseName(relative: string): string {
  return relative.slice(relative.lastIndexOf("/") + 1);
}

/** The parent of a workspace-relative path ("" for a top-level one). */
export function parentOf(relative: string): string {
  const i = relative.lastIndexOf("/");
  return i < 0 ? "" : relative.slice(0, i);
}
