/**
 * An unpacked image as a session's root. bwrap binds the rootfs read-only
 * before it mounts anything over it, so every mount point the sandbox uses
 * must already be a directory in the rootfs: the runner makes the missing
 * ones (empty directories) once, before the first launch. Each path is
 * checked component by component with lstat, so a symlink in an image (which
 * could point anywhere on the host) is never followed here.
 */
import { lstatSync } from "node:fs";
import { lstat, mkdir } from "node:fs/promises";
import { delimiter, isAbsolute, join } from "node:path";
import { SpawnError } from "../../errors.ts";
import { IMAGE_TMPFS } from "./launch.ts";

/** What the launch mounts over an image's root, besides IMAGE_TMPFS: /proc, /dev, /tmp. */
const MOUNT_POINTS = ["/proc", "/dev", "/tmp", ...IMAGE_TMPFS];

/** Makes the mount points the image lacks; refuses one that is not a directory (a symlink, a file). */
export async function prepareImageRoot(rootfs: string, reference: string): Promise<void> {
  for (const point of MOUNT_POINTS) {
    let at = rootfs;
    let inside = "";
    for (const part of point.split("/").filter(Boolean)) {
      at = join(at, part);
      inside = `${inside}/${part}`;
      let info = await lstat(at).catch(() => undefined);
      if (!info) {
        // Another session's launch of the same image may make it first.
        await mkdir(at, { mode: 0o755 }).catch((err: NodeJS.ErrnoException) => {
          if (err.code !== "EEXIST") throw err;
        });
        info = await lstat(at);
      }
      if (!info.isDirectory()) throw new SpawnError(`image ${reference.slice(0, 256)}: ${inside} is not a directory, cannot mount ${point} there`);
    }
  }
}

/**
 * Whether command names something in the image (absolute, or on PATH inside
 * it). Only existence is checked: links in an image may be absolute, which
 * resolve against the host's root from out here, so following them would
 * refuse a command that works inside.
 */
export function imageCommandExists(rootfs: string, command: string, path: string): boolean {
  if (command.includes("/")) return !isAbsolute(command) || exists(join(rootfs, command));
  return path.split(delimiter).some((dir) => isAbsolute(dir) && exists(join(rootfs, dir, command)));
}

function exists(file: string): boolean {
  try {
    lstatSync(file);
    return true;
  } catch {
    return false;
  }
}
