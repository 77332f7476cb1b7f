import { describe, expect, it } from "vitest";
import { actorIdOfClaim, Id, OidcLoginQuery, ReturnToPath } from "./index.ts";

describe("actorIdOfClaim", () => {
  it("keeps an id as it is and escapes anything else byte by byte, `_` included", () => {
    expect(actorIdOfClaim("alice")).toBe("alice");
    expect(actorIdOfClaim("0b1e-77")).toBe("0b1e-77");
    expect(actorIdOfClaim("alice@example.com")).toBe("alice_40example_2ecom");
    expect(actorIdOfClaim("a_b")).toBe("a_5fb");
    expect(actorIdOfClaim("zoë")).toBe("zo_c3_ab");
  });

  it("never gives two values one id, and every id it gives is an actor id", () => {
    const values = ["a.b@x.com", "a_b@x.com", "a_2eb@x.com", "a_5f2eb@x.com", "A.b@x.com", "a.b@x.co_m", "a%2eb@x.com"];
    const ids = values.map(actorIdOfClaim);
    expect(new Set(ids).size).toBe(values.length);
    for (const id of ids) expect(Id.safeParse(id).success).toBe(true);
  });

  it("answers undefined for an empty value or one longer than an id may be", () => {
    expect(actorIdOfClaim("")).toBeUndefined();
    expect(actorIdOfClaim("x".repeat(64))).toBe("x".repeat(64));
    expect(actorIdOfClaim("x".repeat(65))).toBeUndefined();
    expect(actorIdOfClaim(`${"x".repeat(60)}@y`)).toBe(`${"x".repeat(60)}_40y`);
    expect(actorIdOfClaim(`${"x".repeat(61)}@y`)).toBeUndefined();
  });
});

describe("returnTo", () => {
  it.each(["/", "/console", "/a/b?c=d"])("takes the path %s of this origin", (p) => {
    expect(ReturnToPath.safeParse(p).success).toBe(true);
  });
  it.each(["//evil.example/", "/\\evil.example", "https://evil.example/", "evil", "/a#b", "/a b", "/\u0000", ""])("refuses %j", (p) => {
    expect(ReturnToPath.safeParse(p).success).toBe(false);
  });
  it("defaults to /", () => {
    expect(OidcLoginQuery.parse({})).toEqual({ returnTo: "/" });
  });
});
