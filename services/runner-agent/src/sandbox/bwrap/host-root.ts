/**
 * The host's root as a session sees it: each top-level entry of `/` bound
 * read-only on its own (a symlink, `/bin -> usr/bin`, made as the same
 * symlink), on bwrap's read-only root tmpfs, rather than `/` itself.
 *
 * Why not `--ro-bind / /`: bwrap binds recursively and then remounts every
 * submount read-only, one by one, in a namespace that still receives the
 * host's unmounts. A mount that goes away meanwhile fails the launch
 * ("Unable to apply mount flags: remount …: Invalid argument"), and the
 * runners of a host add and remove one under /run/netns with every session
 * network. Leaving out the top-level directories the sandbox replaces anyway
 * (/proc, /dev, /tmp, /run, /home, /root) leaves that churn outside.
 */
import { lstatSync, readdirSync, readlinkSync } from "node:fs";
import type { HostRootEntry, SandboxRoot } from "./launch.ts";

/** What the sandbox makes itself (launch.ts) or hides, so never binds from the host. */
export const NOT_BOUND = ["proc", "dev", "tmp", "run", "home", "root", "lost+found"] as const;

/** The entries of dir (`/`) a session's root gets, sorted by name. */
export function readHostRoot(dir = "/"): HostRootEntry[] {
  const entries: HostRootEntry[] = [];
  for (const name of readdirSync(dir).sort()) {
    if ((NOT_BOUND as readonly string[]).includes(name)) continue;
    const path = `${dir === "/" ? "" : dir}/${name}`;
    try {
      const st = lstatSync(path);
      if (st.isSymbolicLink()) entries.push({ name, kind: "symlink", target: readlinkSync(path) });
      else if (st.isDirectory() || st.isFile()) entries.push({ name, kind: "bind" });
    } catch {
      // gone since readdir: nothing to bind
    }
  }
  return entries;
}

let cached: SandboxRoot | undefined;

/** The host root, read once per process (top-level entries of `/` come and go about never). */
export function hostRoot(): SandboxRoot {
  cached ??= { kind: "host", entries: readHostRoot() };
  return cached;
}
