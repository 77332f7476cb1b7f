/**
 * Starting a session from a cached image (issue #23, images): what the bwrap
 * backend does on create for a session naming an image it has (lease from
 * the store's cache, mount points checked, launch rooted in the rootfs) up to
 * the command's exit, against the same launch over the host's root. No
 * network (loopback only) on either side: its cost is the sandbox bench's.
 * Needs root (a uid of its own per launch), as the runner's bwrap backend does.
 */
import { chmodSync, chownSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { join } from "node:path";
import { createImageStore, type ImagesConfig } from "@paddock/runner-agent/images";
import { createUidAllocator, prepareImageRoot, probeBwrap, spawnInSandbox, type BwrapTools, type SandboxRoot, type SandboxSpec } from "../../services/runner-agent/src/sandbox/bwrap/index.ts";
import { figure, percentile, type Figure } from "./stats.ts";
import { hostRoot } from "../../services/runner-agent/src/sandbox/bwrap/host-root.ts";

const PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/** Clear of the sandbox bench's uids (140,000-140,999). */
const FIRST_UID = 141_000;
const UID_COUNT = 64;

export async function cachedImageStartBench(ref: string, config: ImagesConfig, samples: number): Promise<Figure[]> {
  const cap = await probeBwrap({ uid: FIRST_UID + UID_COUNT - 1, gid: FIRST_UID + UID_COUNT - 1, path: PATH });
  if (!cap.works || !cap.tools) throw new Error(`bwrap sandbox unavailable: ${cap.reason ?? ""}`);
  const tools = cap.tools;
  // Under a directory the session uids can pass (a mkdtemp in /tmp is 0700), as the runner's data dir is.
  const dataDir = mkdtempSync("/var/lib/paddock-bench-image-start-");
  chmodSync(dataDir, 0o711);
  const store = createImageStore({ root: join(dataDir, "images"), config });
  await store.start();
  (await store.pull(ref)).release(); // cached from here on
  const uids = createUidAllocator({ first: FIRST_UID, count: UID_COUNT - 1, reserved: [0] });
  try {
    const host: number[] = [];
    const image: number[] = [];
    for (let i = 0; i < samples; i++) {
      let start = performance.now();
      await launch(tools, dataDir, `h${i}`, uids.allocate(`h${i}`), hostRoot(), ["/bin/true"]);
      host.push(performance.now() - start);
      uids.release(`h${i}`);
      start = performance.now();
      const lease = await store.pull(ref);
      await prepareImageRoot(lease.image.rootfs, ref);
      await launch(tools, dataDir, `i${i}`, uids.allocate(`i${i}`), { kind: "image", dir: lease.image.rootfs }, ["/bin/busybox", "true"]);
      lease.release();
      image.push(performance.now() - start);
      uids.release(`i${i}`);
    }
    const base = { name: "same launch on the host root p50", value: percentile(host, 50) };
    return [
      figure({ bench: "images", metric: "session start from the cached image (lease + launch to exit) p50", value: percentile(image, 50), unit: "ms", baseline: base }),
      figure({ bench: "images", metric: "session start from the cached image p99", value: percentile(image, 99), unit: "ms", baseline: { name: "host root p99", value: percentile(host, 99) } }),
    ];
  } finally {
    await store.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

async function launch(tools: BwrapTools, dataDir: string, name: string, ids: { uid: number; gid: number }, root: SandboxRoot, command: string[]): Promise<void> {
  const dir = join(dataDir, name);
  for (const d of [dir, join(dir, "ws"), join(dir, "home"), join(dir, "tmp")]) {
    mkdirSync(d, { recursive: true });
    chownSync(d, ids.uid, ids.gid);
  }
  const spec: SandboxSpec = {
    sessionId: `s${ids.uid}`,
    uid: ids.uid,
    gid: ids.gid,
    root,
    workspace: { host: join(dir, "ws"), path: "/home/workspace" },
    home: { host: join(dir, "home"), path: "/home/session" },
    tmpDir: join(dir, "tmp"),
    hide: [dataDir],
    env: { PATH },
    cwd: "/home/workspace",
    command,
    rlimits: { processes: 256, openFiles: 1024, fileSizeBytes: 1 << 30 },
    tty: false,
  };
  const exit = await spawnInSandbox(spec, { tools, onData: () => undefined }).exited;
  if (exit.exitCode !== 0) throw new Error(`sandboxed command failed: ${JSON.stringify(exit)}`);
  rmSync(dir, { recursive: true, force: true });
}
