import { existsSync, watch } from "node:fs";
import { join } from "node:path";

/** Resolves once `path` no longer exists (fs.watch on its parent, no polling). */
export async function untilGone(path: string): Promise<void> {
  if (!existsSync(path)) return;
  await new Promise<void>((resolve) => {
    const w = watch(join(path, ".."), () => {
      if (!existsSync(path)) {
        w.close();
        resolve();
      }
    });
    // Gone between the first look and the watch: no event would come.
    if (!existsSync(path)) {
      w.close();
      resolve();
    }
  });
}
