import { describe, expect, it } from "vitest";
import { ConfigError } from "@paddock/config";
import { loadConfig } from "../config.ts";
import { confineCookie, forwardResponseHeaders, PREVIEW_CSP } from "./preview-headers.ts";
import { matchPreview, matchPreviewHost, previewHostsOf, previewHostUrl } from "./preview-match.ts";

const hosts = previewHostsOf("https://preview.example.com");
const local = previewHostsOf("http://Preview.localhost:8080");

describe("a preview by path", () => {
  it("names the session and port, the app's path with its query, and a sandboxed page confined to its prefix", () => {
    expect(matchPreview("/v1/sessions/ses_a1/ports/8000/x/y?q=1")).toEqual({ sessionId: "ses_a1", port: 8000, path: "/x/y?q=1", bare: false, prefix: "/v1/sessions/ses_a1/ports/8000/", sandboxed: true });
    expect(matchPreview("/v1/sessions/ses_a1/ports/8000")?.bare).toBe(true);
    for (const url of ["/v1/sessions/ses_a1/ports/0/", "/v1/sessions/ses_a1/ports/65536/", "/v1/sessions/ses_a1/ports/x/", "/v1/sessions/ses a/ports/1/", "/v1/sessions"]) expect(matchPreview(url), url).toBeUndefined();
  });
});

describe("a preview by host", () => {
  it("names the session and port in its first label; every path is the app's, on a page of its own origin", () => {
    expect(matchPreviewHost(hosts, "8000-ses_a1.preview.example.com", "/v1/sessions?x=1")).toEqual({ sessionId: "ses_a1", port: 8000, path: "/v1/sessions?x=1", bare: false, prefix: "/", sandboxed: false });
    // Hosts are case-insensitive; the origin's port is part of the host.
    expect(matchPreviewHost(local, "3000-SES_B2.preview.LOCALHOST:8080", "/")).toMatchObject({ sessionId: "ses_b2", port: 3000 });
    expect(previewHostUrl(hosts as NonNullable<typeof hosts>, "ses_a1", 8000)).toBe("https://8000-ses_a1.preview.example.com/");
  });

  it("leaves every other host to the gateway's routes, and refuses a preview host naming no preview", () => {
    for (const host of ["preview.example.com", "api.example.com", "8000-ses_a1.preview.example.com.evil.org", "8000-ses_a1.xpreview.example.com", undefined]) expect(matchPreviewHost(hosts, host, "/"), String(host)).toBe("none");
    expect(matchPreviewHost(local, "3000-ses_b2.preview.localhost", "/"), "another port than the origin's").toBe("none");
    for (const host of ["0-ses_a1.preview.example.com", "70000-ses_a1.preview.example.com", "ses_a1.preview.example.com", "8000-.preview.example.com", "a.8000-ses_a1.preview.example.com", "8000-ses%41.preview.example.com"]) {
      expect(matchPreviewHost(hosts, host, "/"), host).toBe("unknown");
    }
    // An absolute-form request target is not a path of the app's.
    expect(matchPreviewHost(hosts, "8000-ses_a1.preview.example.com", "http://elsewhere/")).toBe("unknown");
    expect(matchPreviewHost(undefined, "8000-ses_a1.preview.example.com", "/")).toBe("none");
  });

  it("keeps the app's own cookie path and CSP on its own origin; drops a cookie's Domain either way", () => {
    expect(confineCookie("sid=1; Path=/admin; Domain=preview.example.com; HttpOnly", "/")).toBe("sid=1; Path=/admin; HttpOnly");
    expect(confineCookie("sid=1; Path=/admin; Domain=example.com", "/v1/sessions/s/ports/1/")).toBe("sid=1; Path=/v1/sessions/s/ports/1/");
    const own = forwardResponseHeaders(["Content-Security-Policy", "default-src 'self'", "Connection", "close"], "/", false);
    expect(own).toEqual([["Content-Security-Policy", "default-src 'self'"]]);
    const shared = forwardResponseHeaders(["Content-Security-Policy", "default-src 'self'"], "/v1/sessions/s/ports/1/", true);
    expect(shared).toEqual([["Content-Security-Policy", PREVIEW_CSP]]);
  });

  it("is configured by PADDOCK_PREVIEW_ORIGIN, a scheme and a DNS name (and port) only", () => {
    const base = { PADDOCK_NATS_URL: "nats://127.0.0.1:4222" };
    expect(loadConfig(base).previewOrigin).toBeUndefined();
    expect(loadConfig({ ...base, PADDOCK_PREVIEW_ORIGIN: "http://preview.localhost:8080" }).previewOrigin).toBe("http://preview.localhost:8080");
    for (const bad of ["preview.example.com", "ftp://preview.example.com", "https://preview.example.com/path", "https://preview.example.com?q", "https://u:p@preview.example.com", "http://127.0.0.1:8080", "http://[::1]:8080", ""]) {
      expect(() => loadConfig({ ...base, PADDOCK_PREVIEW_ORIGIN: bad }), bad).toThrow(ConfigError);
    }
  });
});
