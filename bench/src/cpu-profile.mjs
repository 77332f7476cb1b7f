// Loaded with `node --import` (NODE_OPTIONS) when PADDOCK_BENCH_PROFILE_DIR is
// set: a V8 CPU profile of the whole process life, written at exit
// (NODE_OPTIONS may not carry --cpu-prof). The same-thread inspector session
// answers synchronously, so the exit handler can still write the file.
import { Session } from "node:inspector";
import { writeFileSync } from "node:fs";
import { join } from "node:path";

const dir = process.env.PADDOCK_BENCH_PROFILE_DIR;
if (dir) {
  const session = new Session();
  session.connect();
  session.post("Profiler.enable");
  session.post("Profiler.setSamplingInterval", { interval: 500 });
  session.post("Profiler.start");
  process.on("exit", () => {
    session.post("Profiler.stop", (err, res) => {
      if (!err) writeFileSync(join(dir, `${process.argv[1]?.split("/").slice(-3, -2)[0] ?? "node"}-${process.pid}.cpuprofile`), JSON.stringify(res.profile));
    });
  });
}
