import { describe, expect, it } from "vitest";
import { SlidingWindowLimiter } from "./rate-limit.ts";
import { IgnoreRules } from "./watcher.ts";

describe("watch ignore rules", () => {
  const rules = IgnoreRules.parse(["# comment", "", "  dist/  ", "*.log", "/data/", "build/out", "src/**/gen", "cache?"].join("\n"));

  it.each([
    [".git", true],
    [".git/HEAD", true],
    ["sub/.git/index", true],
    ["node_modules/x/index.js", true],
    [".paddockignore", true],
    ["dist", true],
    ["app/dist/bundle.js", true],
    ["server.log", true],
    ["logs/today.log", true],
    ["data/db.sqlite", true],
    ["sub/data/db.sqlite", false],
    ["build/out/a.o", true],
    ["x/build/out/a.o", false],
    ["src/gen", true],
    ["src/a/b/gen/x.ts", true],
    ["cache1/x", true],
    ["cache12/x", false],
    ["src/index.ts", false],
    ["distant.txt", false],
    ["log", false],
    ["./src/dist.ts", false],
  ])("%s ignored: %s", (path, expected) => {
    expect(rules.matches(path)).toBe(expected);
  });

  it("regular expression characters in a pattern are literal", () => {
    const r = IgnoreRules.parse("a+b.(c)\n");
    expect(r.matches("a+b.(c)")).toBe(true);
    expect(r.matches("aab.(c)")).toBe(false);
    expect(r.matches("a+bx(c)")).toBe(false);
  });

  it("without an ignore file only the fixed rules apply", () => {
    const r = IgnoreRules.parse("");
    expect(r.matches("node_modules")).toBe(true);
    expect(r.matches("dist/x")).toBe(false);
  });
});

describe("reload rate limit", () => {
  it("admits max per window and answers how long until the window has room (the trailing edge)", () => {
    let t = 1_000;
    const limiter = new SlidingWindowLimiter(2, 1_000, () => t);
    expect(limiter.acquireOrWait()).toBe(0);
    t = 1_300;
    expect(limiter.acquireOrWait()).toBe(0);
    t = 1_500;
    expect(limiter.acquireOrWait()).toBe(500);
    t = 2_000;
    expect(limiter.acquireOrWait()).toBe(0);
    expect(limiter.acquireOrWait()).toBe(300);
  });
});
