/** Errors of the runner agent; each carries a stable code for logs and metrics. */
export const RunnerErrorCode = {
  spawnFailed: "spawn_failed",
  generationFile: "generation_file",
  registrationRefused: "registration_refused",
  stopped: "stopped",
} as const;
export type RunnerErrorCode = (typeof RunnerErrorCode)[keyof typeof RunnerErrorCode];

export class RunnerError extends Error {
  constructor(
    readonly code: RunnerErrorCode,
    message: string,
  ) {
    super(message);
    this.name = "RunnerError";
  }
}

/** An app could not be started; `message` is short and safe to put in a fact. */
export class SpawnError extends RunnerError {
  constructor(message: string) {
    super(RunnerErrorCode.spawnFailed, message);
    this.name = "SpawnError";
  }
}

export class GenerationFileError extends RunnerError {
  constructor(message: string) {
    super(RunnerErrorCode.generationFile, message);
    this.name = "GenerationFileError";
  }
}

export class RegistrationRefusedError extends RunnerError {
  constructor(message: string) {
    super(RunnerErrorCode.registrationRefused, message);
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
