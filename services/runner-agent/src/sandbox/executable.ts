import { accessSync, constants as fsConstants, statSync } from "node:fs";
import { delimiter, isAbsolute, join, resolve } from "node:path";

/**
 * Finds the executable the way execvp would. node-pty forks before exec, so a
 * missing command only shows up as exit code 1 with an error printed in the
 * terminal (a sandbox's launch chain: bwrap's execvp error); resolving
 * first turns it into a clean `failed` fact.
 */
export function resolveExecutable(command: string, cwd: string, path: string): string | undefined {
  const candidates = command.includes("/")
    ? [isAbsolute(command) ? command : resolve(cwd, command)]
    : path.split(delimiter).filter(Boolean).map((dir) => join(dir, command));
  return candidates.find(isExecutableFile);
}

function isExecutableFile(file: string): boolean {
  try {
    accessSync(file, fsConstants.X_OK);
    return statSync(file).isFile();
  } catch {
    return false;
  }
}
