/**
 * The filesystem capability's apply_patch editor over Paddock's files API:
 * a V4A diff is applied here (the framework's `applyDiff`) to the file read
 * from the workspace, and the result written back.
 */
import { applyDiff, UserError, type ApplyPatchOperation, type ApplyPatchResult, type Editor } from "@openai/agents";

/** What the editor needs of a session: paths as the framework names them (absolute under the root, or relative). */
export interface EditorFiles {
  pathExists(path: string): Promise<boolean>;
  readText(path: string): Promise<string>;
  writeFile(path: string, content: string): Promise<void>;
  removeFile(path: string): Promise<void>;
}

type Op<T extends ApplyPatchOperation["type"]> = Extract<ApplyPatchOperation, { type: T }>;

export class PaddockEditor implements Editor {
  constructor(private readonly files: EditorFiles) {}

  async createFile(op: Op<"create_file">): Promise<ApplyPatchResult> {
    if (await this.files.pathExists(op.path)) throw new UserError(`Cannot create file because it already exists: ${op.path}`);
    await this.files.writeFile(op.path, applyDiff("", op.diff, "create"));
    return {};
  }

  async updateFile(op: Op<"update_file">): Promise<ApplyPatchResult> {
    const next = applyDiff(await this.files.readText(op.path), op.diff);
    const destination = op.moveTo ?? op.path;
    await this.files.writeFile(destination, next);
    if (destination !== op.path) await this.files.removeFile(op.path);
    return {};
  }

  async deleteFile(op: Op<"delete_file">): Promise<ApplyPatchResult> {
    await this.files.removeFile(op.path);
    return {};
  }
}
