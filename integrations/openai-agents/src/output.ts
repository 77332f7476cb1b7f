/**
 * The exec tool's answer as the framework's own sandboxes format it (the
 * model is prompted for this shape), and its output cut to the token budget
 * the tool call names. Written here, not imported: the framework keeps these
 * helpers in `@openai/agents-core/sandbox/internal`, which is not public API.
 */

const BYTES_PER_TOKEN = 4;
const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** `output` within `maxOutputTokens` (≈4 bytes a token): its head and tail, a marker between. */
export function truncateOutput(output: string, maxOutputTokens?: number): { text: string; originalTokenCount?: number } {
  if (maxOutputTokens === undefined) return { text: output };
  const bytes = encoder.encode(output);
  const budget = Math.max(0, maxOutputTokens) * BYTES_PER_TOKEN;
  if (bytes.byteLength <= budget) return { text: output };
  const originalTokenCount = Math.ceil(bytes.byteLength / BYTES_PER_TOKEN);
  const half = Math.floor(budget / 2);
  const head = decoder.decode(bytes.subarray(0, half)).replace(/\uFFFD$/, "");
  const tail = decoder.decode(bytes.subarray(bytes.byteLength - (budget - half))).replace(/^\uFFFD/, "");
  const dropped = Math.ceil((bytes.byteLength - budget) / BYTES_PER_TOKEN);
  return { text: `${head}...${dropped} tokens truncated...${tail}`, originalTokenCount };
}

export function formatExecResponse(args: { output: string; wallTimeSeconds: number; exitCode?: number | null; originalTokenCount?: number | undefined }): string {
  const lines = [`Chunk ID: ${globalThis.crypto.randomUUID().replace(/-/g, "").slice(0, 6)}`, `Wall time: ${args.wallTimeSeconds.toFixed(4)} seconds`];
  if (typeof args.exitCode === "number") lines.push(`Process exited with code ${args.exitCode}`);
  if (args.originalTokenCount !== undefined) lines.push(`Original token count: ${args.originalTokenCount}`);
  lines.push("Output:", args.output);
  return lines.join("\n");
}

/** The media type of an image's bytes (what view_image accepts), or undefined. */
export function imageMediaType(bytes: Uint8Array): string | undefined {
  const starts = (sig: readonly number[], at = 0) => sig.every((b, i) => bytes[at + i] === b);
  const ascii = (s: string, at = 0) => starts([...s].map((c) => c.charCodeAt(0)), at);
  if (starts([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])) return "image/png";
  if (starts([0xff, 0xd8, 0xff])) return "image/jpeg";
  if (ascii("GIF87a") || ascii("GIF89a")) return "image/gif";
  if (ascii("RIFF") && ascii("WEBP", 8)) return "image/webp";
  return undefined;
}
