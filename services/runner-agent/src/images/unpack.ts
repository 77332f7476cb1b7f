// Unpacking is umoci's (Debian's `umoci`): it applies layers in order with
// OCI whiteouts, hard links and symlinks, and resolves every path inside the
// rootfs (securejoin), so a hostile layer cannot write outside it. What it
// would still create inside that a session has no use for (device nodes,
// FIFOs, sockets) is removed after, in the walk that also measures the size.
import { spawn } from "node:child_process";
import { lstat, readdir, rm } from "node:fs/promises";
import { join } from "node:path";
import { ImageError, ImageErrorCode } from "./errors.ts";

export interface UnpackOptions {
  umociPath: string;
  /** umoci's --rootless: no chown, no device nodes; needed when the runner is not root. */
  rootless: boolean;
}

/** Runs `umoci raw unpack` of layoutDir:tag into rootfs (which must not exist). */
export async function umociUnpack(layoutDir: string, tag: string, rootfs: string, opts: UnpackOptions): Promise<void> {
  const args = ["raw", "unpack", ...(opts.rootless ? ["--rootless"] : []), "--image", `${layoutDir}:${tag}`, rootfs];
  const child = spawn(opts.umociPath, args, { stdio: ["ignore", "ignore", "pipe"] });
  let stderr = "";
  child.stderr.on("data", (d: Buffer) => {
    stderr = (stderr + d.toString()).slice(-4096);
  });
  const code = await new Promise<number | null>((resolve, reject) => {
    child.once("error", reject);
    child.once("close", (c, signal) => resolve(signal ? -1 : c));
  }).catch((err: unknown) => {
    throw new ImageError(ImageErrorCode.unpackFailed, `umoci could not run`, { cause: err });
  });
  if (code !== 0) {
    const last = stderr.trim().split("\n").pop() ?? "";
    throw new ImageError(ImageErrorCode.unpackFailed, `umoci unpack failed: ${last.slice(0, 300)}`);
  }
}

/** Removes device nodes, FIFOs and sockets under root and returns the bytes of what stays (apparent sizes). */
export async function sweepAndMeasure(root: string): Promise<{ bytes: number; removed: string[] }> {
  let bytes = 0;
  const removed: string[] = [];
  const stack = [root];
  while (stack.length > 0) {
    const dir = stack.pop() as string;
    for (const entry of await readdir(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) stack.push(path);
      else if (entry.isFile() || entry.isSymbolicLink()) bytes += (await lstat(path)).size;
      else {
        await rm(path, { force: true });
        removed.push(path.slice(root.length));
      }
    }
  }
  return { bytes, removed };
}
