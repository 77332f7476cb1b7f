// The restore worker's entry when the runner runs from its TypeScript source:
// a worker thread does not inherit the tsx loader of `node --import tsx`
// (Node 20), so it loads the worker through tsx's API. A built runner starts
// dist/fill-worker.js instead (scripts/build.ts).
import { tsImport } from "tsx/esm/api";

await tsImport("./fill-worker.ts", import.meta.url);
