/**
 * Short leases and fast sweeps, so a runner lost to a fault (a kill, a stop,
 * a cut link) plays out in seconds (the defaults are 10 s + 20 s). Spread into
 * startStack's `env` and add what a test needs beside it.
 */
export const FAST_LIVENESS_ENV: { scheduler: Record<string, string>; "runner-agent": Record<string, string> } = {
  scheduler: {
    PADDOCK_SCHEDULER_TICK_MS: "200",
    PADDOCK_RUNNER_LEASE_TTL_MS: "2000",
    PADDOCK_RUNNER_LOST_GRACE_MS: "1000",
    PADDOCK_REDISPATCH_AFTER_MS: "1000",
    PADDOCK_CAPACITY_REPAIR_QUIET_MS: "2000",
    PADDOCK_CREATING_TIMEOUT_MS: "20000",
  },
  "runner-agent": { PADDOCK_RUNNER_LEASE_TTL_MS: "2000", PADDOCK_RUNNER_LEASE_RENEW_MS: "400" },
};
