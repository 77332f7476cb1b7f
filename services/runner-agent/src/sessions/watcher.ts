import { readFileSync } from "node:fs";
import { join } from "node:path";
import { watchTree } from "../workspace/tree-watch.ts";

/** A workspace file of ignore patterns (its own changes never reload either). */
export const IGNORE_FILE = ".paddockignore";
/** Always ignored, whatever the ignore file says: version control bookkeeping and installed packages. */
export const ALWAYS_IGNORED = [".git", "node_modules"] as const;
/** The ignore file is read up to this size; patterns past it are not seen. */
const MAX_IGNORE_FILE_BYTES = 64 * 1024;

/** A glob of path components as a regular expression body: `**` spans components, `*` and `?` stay within one. */
function globBody(glob: string): string {
  let out = "";
  for (let i = 0; i < glob.length; i++) {
    const c = glob[i] as string;
    if (c === "*" && glob[i + 1] === "*") {
      const slash = glob[i + 2] === "/";
      out += slash ? "(?:.*/)?" : ".*";
      i += slash ? 2 : 1;
    } else if (c === "*") out += "[^/]*";
    else if (c === "?") out += "[^/]";
    else out += c.replace(/[\\^$.|+()[\]{}]/g, "\\$&");
  }
  return out;
}

/**
 * Which workspace paths never reload a watch session: `.git/`, `node_modules/`,
 * the ignore file itself, and the patterns of `.paddockignore` at the
 * workspace root. One pattern a line; blank lines and `#` comments skipped; a
 * pattern matches a path and everything beneath it. Without a `/` (other than
 * a trailing one) it matches a name at any depth (`*.log`, `dist`, `tmp/`);
 * with one it is anchored at the workspace root (`build/out`, `/data/`). `*`
 * and `?` stay within a name, `**` spans directories; no negation.
 */
export class IgnoreRules {
  private constructor(private readonly patterns: RegExp[]) {}

  static parse(text: string): IgnoreRules {
    const patterns: RegExp[] = [];
    for (const raw of [...ALWAYS_IGNORED, IGNORE_FILE, ...text.split(/\r?\n/)]) {
      const line = raw.trim();
      if (line === "" || line.startsWith("#")) continue;
      const body = line.replace(/^\/+/, "").replace(/\/+$/, "");
      if (body === "") continue;
      const anchored = line.startsWith("/") || body.includes("/");
      patterns.push(new RegExp(`${anchored ? "^" : "(?:^|/)"}${globBody(body)}(?:/.*)?$`));
    }
    return new IgnoreRules(patterns);
  }

  /** The workspace's rules now (only the fixed ones when it has no readable ignore file). */
  static read(workspace: string): IgnoreRules {
    let text = "";
    try {
      text = readFileSync(join(workspace, IGNORE_FILE)).subarray(0, MAX_IGNORE_FILE_BYTES).toString("utf8");
    } catch {
      // none, or not readable: the fixed rules apply
    }
    return IgnoreRules.parse(text);
  }

  matches(relativePath: string): boolean {
    const path = relativePath.split(/[\\/]+/).filter((p) => p !== "" && p !== ".").join("/");
    return this.patterns.some((p) => p.test(path));
  }
}

export interface WorkspaceWatcher {
  close(): void;
}

/** Directories one reload watcher watches at most (each is an inotify watch, a per-user kernel budget). */
const MAX_RELOAD_WATCH_DIRS = 65_536;

/**
 * Watches a workspace recursively and reports every change with its path
 * relative to the workspace (undefined when the platform does not say).
 * Through the runner's one watcher (workspace/tree-watch.ts): no symlink is
 * followed, and `.git` and `node_modules`, whose changes never reload, are
 * not descended into. A watcher error (the directory went away) just ends watching.
 */
export function watchWorkspace(dir: string, onChange: (relativePath: string | undefined) => void): WorkspaceWatcher {
  const ignored = new Set<string>(ALWAYS_IGNORED);
  try {
    return watchTree(dir, "", {
      maxDirs: MAX_RELOAD_WATCH_DIRS,
      recursive: true,
      skipDir: (path) => ignored.has(path.slice(path.lastIndexOf("/") + 1)),
      onChange: (path) => onChange(path),
    });
  } catch {
    return { close: () => undefined };
  }
}
