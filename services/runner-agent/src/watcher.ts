import { watch, type FSWatcher } from "node:fs";

export interface WorkspaceWatcher {
  close(): void;
}

/** Paths whose changes never reload the apps (version control bookkeeping). */
export function ignoredChange(relativePath: string): boolean {
  const first = relativePath.split(/[\\/]/)[0];
  return first === ".git";
}

/**
 * Watches a workspace recursively and calls onChange once per burst of
 * changes: after debounceMs without a further change. A watcher error (the
 * directory went away) just ends watching.
 */
export function watchWorkspace(dir: string, debounceMs: number, onChange: () => void): WorkspaceWatcher {
  let timer: NodeJS.Timeout | undefined;
  let closed = false;
  let fsw: FSWatcher | undefined;
  const close = () => {
    closed = true;
    clearTimeout(timer);
    fsw?.close();
  };
  try {
    fsw = watch(dir, { recursive: true, persistent: false }, (_event, file) => {
      if (closed || (typeof file === "string" && ignoredChange(file))) return;
      clearTimeout(timer);
      timer = setTimeout(() => {
        if (!closed) onChange();
      }, debounceMs);
    });
    fsw.on("error", close);
  } catch {
    closed = true;
  }
  return { close };
}
