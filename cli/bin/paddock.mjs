#!/usr/bin/env node
// The `paddock` CLI: TypeScript run through tsx, no build step.
import { register } from "tsx/esm/api";

register();
const { runProcess } = await import("../src/main.ts");
await runProcess();
