/**
 * An archive was refused: an entry that may not be extracted, an invalid
 * archive, or (tooLarge) more entries or bytes than allowed. The message is
 * short and safe to show a client.
 */
export class ArchiveRejectedError extends Error {
  constructor(
    readonly reason: string,
    readonly tooLarge = false,
  ) {
    super(`archive refused: ${reason}`);
    this.name = "ArchiveRejectedError";
  }
}

/** A path inside a root could not be used: it leaves the root, goes through a symlink, or is missing. */
export class UnsafePathError extends Error {
  constructor(
    message: string,
    readonly missing = false,
  ) {
    super(message);
    this.name = "UnsafePathError";
  }
}
