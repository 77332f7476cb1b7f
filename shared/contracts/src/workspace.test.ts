/**
 * A file write names exactly one way its bytes come (inline, a transfer
 * object with its key, or the runner's data plane), and a data-plane write's
 * outcome is its result or a typed error, nothing else.
 */
import { describe, expect, it } from "vitest";
import { FileWriteAnswer, FileWriteOutcome, FileWriteRequest } from "./workspace.ts";

const target = { sessionId: "s1", workspaceId: "w1", placementGeneration: 1, path: "a.txt", mode: 0o644 };
const transfer = { transferId: "t1", sealKey: Buffer.alloc(32, 1).toString("base64") };

describe("FileWriteRequest", () => {
  it("takes exactly one way for the bytes", () => {
    for (const way of [{ inline: true }, transfer, { data: { size: 0 } }, { data: { size: 5_000_000 } }]) expect(FileWriteRequest.safeParse({ ...target, ...way }).success).toBe(true);
  });

  it("refuses none, two, half a transfer, or a bad size", () => {
    const refused = [
      {},
      { inline: true, data: { size: 1 } },
      { ...transfer, data: { size: 1 } },
      { ...transfer, inline: true },
      { transferId: "t1" },
      { data: { size: -1 } },
      { data: { size: 1.5 } },
      { data: { size: 1, extra: true } },
    ];
    for (const way of refused) expect([way, FileWriteRequest.safeParse({ ...target, ...way }).success]).toEqual([way, false]);
  });
});

describe("a data-plane write's answers", () => {
  it("are an offer (or null: no data plane) first, then a result or an error on the connection", () => {
    expect(FileWriteAnswer.safeParse({ data: null }).success).toBe(true);
    expect(FileWriteAnswer.safeParse({ data: { host: "127.0.0.1", port: 7443, ticket: "A".repeat(43) } }).success).toBe(true);
    expect(FileWriteAnswer.safeParse({ path: "a.txt", size: 3 }).success).toBe(true);
    expect(FileWriteAnswer.safeParse({ data: { host: "127.0.0.1", port: 7443, ticket: "short" } }).success).toBe(false);
    expect(FileWriteOutcome.safeParse({ ok: true, result: { path: "a.txt", size: 3 } }).success).toBe(true);
    expect(FileWriteOutcome.safeParse({ ok: false, error: { code: "invalid", message: "path is a directory" } }).success).toBe(true);
    expect(FileWriteOutcome.safeParse({ ok: false, result: { path: "a.txt", size: 3 } }).success).toBe(false);
    expect(FileWriteOutcome.safeParse({ ok: true }).success).toBe(false);
  });
});
