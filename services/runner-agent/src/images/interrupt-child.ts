// Run by store.test.ts as its own process group, then killed mid-unpack:
// `interrupt-child.ts <cache root> <layout dir> <umoci path>`.
import { ImagesConfig } from "./config.ts";
import { createImageStore } from "./store.ts";

const [root, layout, umociPath] = process.argv.slice(2);
if (!root || !layout || !umociPath) throw new Error("usage: interrupt-child.ts <root> <layout> <umoci>");
const store = createImageStore({ root, config: ImagesConfig.parse({ umociPath }) });
await store.start();
await store.load({ format: "oci-layout", path: layout, tag: "t" });
