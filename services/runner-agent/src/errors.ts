/** Errors of the runner agent; each carries a stable code for logs and metrics. */
export const RunnerErrorCode = {
  spawnFailed: "spawn_failed",
  generationFile: "generation_file",
  registrationRefused: "registration_refused",
  stopped: "stopped",
  archiveRefused: "archive_refused",
  checkpointFailed: "checkpoint_failed",
  bootFailed: "boot_failed",
  commandRefused: "command_refused",
  workspaceTooLarge: "workspace_too_large",
  sandboxUnavailable: "sandbox_unavailable",
} as const;
export type RunnerErrorCode = (typeof RunnerErrorCode)[keyof typeof RunnerErrorCode];

/** `cause` (ES2022) keeps what went wrong for logs; `message` stays the short, fact-safe reason. */
export class RunnerError extends Error {
  constructor(
    readonly code: RunnerErrorCode,
    message: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
    this.name = "RunnerError";
  }
}

/** An app could not be started; `message` is short and safe to put in a fact. */
export class SpawnError extends RunnerError {
  constructor(message: string, options?: ErrorOptions) {
    super(RunnerErrorCode.spawnFailed, message, options);
    this.name = "SpawnError";
  }
}

export class GenerationFileError extends RunnerError {
  constructor(message: string, options?: ErrorOptions) {
    super(RunnerErrorCode.generationFile, message, options);
    this.name = "GenerationFileError";
  }
}

export class RegistrationRefusedError extends RunnerError {
  constructor(message: string, options?: ErrorOptions) {
    super(RunnerErrorCode.registrationRefused, message, options);
    this.name = "RegistrationRefusedError";
  }
}

/** The agent is stopping; pending work gives up. */
export class StoppedError extends RunnerError {
  constructor() {
    super(RunnerErrorCode.stopped, "runner agent stopped");
    this.name = "StoppedError";
  }
}

/** An archive holds an entry that may not be extracted (or is not a valid archive); message is fact-safe. */
export class ArchiveRefusedError extends RunnerError {
  constructor(reason: string, options?: ErrorOptions) {
    super(RunnerErrorCode.archiveRefused, `archive refused: ${reason}`, options);
    this.name = "ArchiveRefusedError";
  }
}

/** An archive pushed into a workspace has more entries or bytes than allowed; message is client-safe. */
export class WorkspaceTooLargeError extends RunnerError {
  constructor(reason: string, options?: ErrorOptions) {
    super(RunnerErrorCode.workspaceTooLarge, `archive refused: ${reason}`, options);
    this.name = "WorkspaceTooLargeError";
  }
}

/** Saving or restoring a checkpoint failed; message is short and fact-safe. */
export class CheckpointError extends RunnerError {
  constructor(message: string, options?: ErrorOptions) {
    super(RunnerErrorCode.checkpointFailed, message, options);
    this.name = "CheckpointError";
  }
}

/** Environment setup or init failed; message is the fact's reason. */
export class BootError extends RunnerError {
  constructor(message: string, options?: ErrorOptions) {
    super(RunnerErrorCode.bootFailed, message, options);
    this.name = "BootError";
  }
}

/** A command cannot be carried out in the session's current state; message is the refused fact's reason. */
export class CommandRefusedError extends RunnerError {
  constructor(message: string, options?: ErrorOptions) {
    super(RunnerErrorCode.commandRefused, message, options);
    this.name = "CommandRefusedError";
  }
}
