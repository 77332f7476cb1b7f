import { mkdir, open, readFile, rename } from "node:fs/promises";
import { join } from "node:path";
import { GenerationFileError } from "../errors.ts";

const FILE = "generation";

/** The last generation this runner was granted; 0 when it never registered. */
export async function readGeneration(dataDir: string): Promise<number> {
  let text: string;
  try {
    text = await readFile(join(dataDir, FILE), "utf8");
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return 0;
    throw err;
  }
  const trimmed = text.trim();
  if (!/^\d{1,15}$/.test(trimmed)) throw new GenerationFileError(`${join(dataDir, FILE)} does not hold a generation`);
  return Number(trimmed);
}

/**
 * Writes the granted generation durably (temp file, fsync, rename): a torn
 * write would make the next start claim a generation it already used.
 */
export async function writeGeneration(dataDir: string, generation: number): Promise<void> {
  await mkdir(dataDir, { recursive: true });
  const tmp = join(dataDir, `${FILE}.tmp`);
  const fh = await open(tmp, "w");
  try {
    await fh.writeFile(`${generation}\n`, "utf8");
    await fh.sync();
  } finally {
    await fh.close();
  }
  await rename(tmp, join(dataDir, FILE));
}
