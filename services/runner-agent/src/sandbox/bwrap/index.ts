/** The bwrap sandbox primitive (issue #23): probe, launch spec, uids, networks, limits. Wired into the runner by backend.ts (PADDOCK_SANDBOX=bwrap or auto). */
export * from "./cgroup.ts";
export * from "./cgroup-probe.ts";
export * from "./launch.ts";
export * from "./network.ts";
export * from "./network-pool.ts";
export * from "./probe.ts";
export * from "./spawn.ts";
export * from "./uid-allocator.ts";
export * from "./image-root.ts";
