/**
 * Imported before anything that defines or parses a schema: zod's fast path
 * compiles parsers with `new Function`, which the console's CSP (script-src
 * 'self', no 'unsafe-eval') refuses, and every refusal is a violation report.
 * Without code generation zod parses the same, a little slower.
 */
import { z } from "zod";

z.config({ jitless: true });
