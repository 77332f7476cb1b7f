/**
 * How a written file takes the place of what was at its path (decision
 * 0069). The file is complete under a temporary name in the same directory
 * (held by descriptor); exchanging the two names (renameat2 RENAME_EXCHANGE,
 * the native addon `native/fs-exchange.node`) and removing the old inode is
 * as atomic for readers as a rename over it, without the write-back of the
 * whole new file that ext4 forces on a rename over an existing name (~1 ms a
 * MiB here). Without the addon, or where the filesystem cannot exchange, it
 * is that rename.
 */
import { renameSync } from "node:fs";
import { createRequire } from "node:module";
import { constants as osc } from "node:os";
import { getSystemErrorName } from "node:util";
import { unlinkQuietly, UnsafePathError, type ReplaceFile } from "@paddock/archive";
import type { Logger } from "@paddock/logging";
import { lstatOrGone } from "./files.ts";

type Exchange = (dirfd: number, a: string, b: string) => number;

const { ENOENT, EINVAL, ENOSYS } = osc.errno;

/** The plain rename: what was at name (a file or a link, never followed) is replaced; a directory there refuses it. */
export const renameInto: ReplaceFile = (dir, tmp, name) => renameSync(dir.at(tmp), dir.at(name));

/** A replacer through exchange; the plain rename where there is nothing to exchange with, or exchange is not supported. */
export function exchangeInto(exchange: Exchange): ReplaceFile {
  return (dir, tmp, name) => {
    const result = exchange(dir.fd, tmp, name);
    if (result === -ENOENT || result === -EINVAL || result === -ENOSYS) return renameInto(dir, tmp, name);
    if (result !== 0) throw exchangeError(result);
    // tmp now names what was at name. A directory (made there since the caller looked) goes back, and is refused as a
    // rename over it would be; a file or a link is removed. The sandbox may already have removed it.
    const old = lstatOrGone(dir.at(tmp));
    if (old?.isDirectory()) {
      exchange(dir.fd, tmp, name);
      throw new UnsafePathError("path is a directory");
    }
    if (old) unlinkQuietly(dir, tmp);
  };
}

/**
 * The replacer this runner uses: exchange through the addon at addonPath
 * when it loads, else the rename (logged once).
 */
export function fileReplacer(addonPath: string, log: Logger): ReplaceFile {
  try {
    const addon = createRequire(import.meta.url)(addonPath) as { exchange?: unknown };
    if (typeof addon.exchange === "function") return exchangeInto(addon.exchange as Exchange);
    log.warn({ addonPath }, "file-exchange addon has no exchange(): file writes replace by rename");
  } catch (err) {
    log.warn({ addonPath, err }, "file-exchange addon not loaded (npm test builds it): file writes replace by rename, which ext4 makes write each replaced file back first");
  }
  return renameInto;
}

/** The exchange's errno as Node reports a failed call (code, errno, syscall). */
function exchangeError(result: number): NodeJS.ErrnoException {
  const code = getSystemErrorName(result);
  return Object.assign(new Error(`${code}: renameat2 (exchange) of a written file failed`), { code, errno: result, syscall: "renameat2" });
}
