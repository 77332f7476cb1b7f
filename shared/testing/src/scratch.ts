import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** Temporary directories of one test file: `make` one per use, `removeAll` from afterEach. */
export interface ScratchDirs {
  make(): string;
  removeAll(): void;
}

export function scratchDirs(prefix: string): ScratchDirs {
  const made: string[] = [];
  return {
    make: () => {
      const dir = mkdtempSync(join(tmpdir(), prefix));
      made.push(dir);
      return dir;
    },
    removeAll: () => {
      for (const dir of made.splice(0)) rmSync(dir, { recursive: true, force: true });
    },
  };
}
