import type { z } from "zod";

/**
 * How deep the JSON of a request body may nest (objects and arrays, the body
 * itself at depth 1). Deeper is `invalid`: no body needs it, and encoding a
 * deeply nested value again (to put it on the bus) exhausts the stack.
 */
export const MAX_JSON_DEPTH = 64;

const OPEN_OBJECT = 0x7b;
const OPEN_ARRAY = 0x5b;
const CLOSE_OBJECT = 0x7d;
const CLOSE_ARRAY = 0x5d;
const QUOTE = 0x22;
const BACKSLASH = 0x5c;

/** Whether JSON text nests deeper than max, scanned without parsing (so before a parser builds it). */
export function jsonDepthExceeds(text: string, max = MAX_JSON_DEPTH): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === BACKSLASH) i++;
      else if (c === QUOTE) inString = false;
    } else if (c === QUOTE) {
      inString = true;
    } else if (c === OPEN_OBJECT || c === OPEN_ARRAY) {
      if (++depth > max) return true;
    } else if (c === CLOSE_OBJECT || c === CLOSE_ARRAY) {
      depth--;
    }
  }
  return false;
}

/**
 * A refinement for request bodies whose strings reach the OS (command
 * arguments, scripts, image names, hosts, paths): NUL in any string or key is
 * refused — exec and the kernel would cut the string there and run something
 * else than the record says — as is nesting deeper than MAX_JSON_DEPTH.
 * Iterative, so it never recurses deeper than the bound.
 */
export function refuseNulAndDeepNesting(value: unknown, ctx: z.RefinementCtx): void {
  const stack: Array<{ v: unknown; path: PropertyKey[] }> = [{ v: value, path: [] }];
  for (let item = stack.pop(); item !== undefined; item = stack.pop()) {
    const { v, path } = item;
    if (typeof v === "string") {
      if (v.includes("\0")) ctx.addIssue({ code: "custom", message: "must not contain NUL", path });
      continue;
    }
    if (v === null || typeof v !== "object") continue;
    if (path.length >= MAX_JSON_DEPTH) {
      ctx.addIssue({ code: "custom", message: `nested deeper than ${String(MAX_JSON_DEPTH)}`, path });
      continue;
    }
    for (const [k, child] of Object.entries(v)) {
      if (k.includes("\0")) ctx.addIssue({ code: "custom", message: "a key must not contain NUL", path });
      stack.push({ v: child, path: [...path, Array.isArray(v) ? Number(k) : k] });
    }
  }
}
