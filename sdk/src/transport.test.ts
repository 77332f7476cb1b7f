import { describe, expect, it } from "vitest";
import { z } from "zod";
import { ndjson } from "./transport.ts";

/** An answer whose body arrives in exactly these pieces. */
function answerIn(pieces: Uint8Array[]): Response {
  return new Response(
    new ReadableStream<Uint8Array>({
      start(controller) {
        for (const p of pieces) controller.enqueue(p);
        controller.close();
      },
    }),
  );
}

const Line = z.object({ n: z.number(), text: z.string() });

describe("ndjson", () => {
  it("yields each line once however the body is cut: lines across pieces, several in one, a character split, blank lines, no final newline", async () => {
    const lines = Array.from({ length: 40 }, (_, n) => ({ n, text: "é€😀".repeat(n) + "x".repeat(n * 97) }));
    const body = Buffer.from(lines.map((l) => JSON.stringify(l)).join("\n\n") + "\n" + JSON.stringify({ n: 40, text: "last" }), "utf8");
    for (const size of [1, 3, 7, 64, 1000, body.length]) {
      const pieces: Uint8Array[] = [];
      for (let at = 0; at < body.length; at += size) pieces.push(body.subarray(at, at + size));
      const got: Array<z.infer<typeof Line>> = [];
      for await (const l of ndjson(answerIn(pieces), Line, "test")) got.push(l);
      expect([size, got]).toEqual([size, [...lines, { n: 40, text: "last" }]]);
    }
  });

  it("refuses a line that is not JSON, or breaks the schema, as internal", async () => {
    const read = async (text: string) => {
      for await (const _ of ndjson(answerIn([Buffer.from(text)]), Line, "test")) void _;
    };
    await expect(read('{"n":1,"text":"a"}\nnot json\n')).rejects.toMatchObject({ code: "internal" });
    await expect(read('{"n":"one","text":"a"}\n')).rejects.toMatchObject({ code: "internal" });
  });
});
