import { watch, type FSWatcher } from "node:fs";

export interface WorkspaceWatcher {
  close(): void;
  /** Counts as a change now (a workspace push): one reload per burst, together with what the watcher itself saw. */
  poke(): void;
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
  const changed = () => {
    clearTimeout(timer);
    timer = setTimeout(() => {
      if (!closed) onChange();
    }, debounceMs);
  };
  try {
    fsw = watch(dir, { recursive: true, persistent: false }, (_event, file) => {
      if (closed || (typeof file === "string" && ignoredChange(file))) return;
      changed();
    });
    fsw.on("error", close);
  } catch {
    closed = true;
  }
  return {
    close,
    poke: () => {
      if (!closed) changed();
    },
  };
}
