import { describe, expect, it } from "vitest";
import { base64ByteLength, utf8ByteLength } from "./bytes.ts";

describe("byte counts without Buffer", () => {
  it("count what Buffer.byteLength counts, for text and base64 of every padding, and odd input", () => {
    for (const s of ["", "a", "é", "日本語", "🙂", "\ud800", "a\u0000b", "x".repeat(1000)]) expect(utf8ByteLength(s)).toBe(Buffer.byteLength(s, "utf8"));
    for (let n = 0; n < 40; n++) {
      const text = Buffer.from(Array.from({ length: n }, (_, i) => i)).toString("base64");
      expect(base64ByteLength(text)).toBe(n);
      expect(base64ByteLength(text)).toBe(Buffer.byteLength(text, "base64"));
    }
    for (const odd of ["=", "==", "a=", "abc", "ab=c", "!!!!", "===="]) expect(base64ByteLength(odd)).toBe(Buffer.byteLength(odd, "base64"));
  });
});
