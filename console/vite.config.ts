import { defineConfig } from "vite";

/**
 * The web console's build (issue 27): static files the gateway serves at `/`.
 * Hashed file names under `assets/` (served with a year's immutable caching),
 * one `index.html` that loads them (never cached). No inline script or style
 * anywhere: the gateway's Content-Security-Policy allows only 'self'.
 */
export default defineConfig({
  root: import.meta.dirname,
  base: "/",
  build: {
    outDir: "dist",
    emptyOutDir: true,
    assetsDir: "assets",
    // Inlined assets would be data: URLs; the CSP allows none for scripts and styles.
    assetsInlineLimit: 0,
    modulePreload: { polyfill: false },
    sourcemap: false,
    target: "es2022",
  },
  // `npx vite` against a running gateway (PADDOCK_URL, as `npm run up` prints it): /v1 goes
  // there, WebSockets too. The Host header is kept (no changeOrigin), so the gateway's
  // same-origin check sees the page's own origin. A stream the gateway cuts (a followed
  // event stream when it stops) is cut for the browser too, as without the proxy.
  server: process.env.PADDOCK_URL
    ? {
        proxy: {
          "/v1": {
            target: process.env.PADDOCK_URL,
            ws: true,
            configure: (proxy) =>
              proxy.on("proxyRes", (upstream, _req, res) => {
                upstream.on("close", () => {
                  if (!upstream.complete) res.destroy();
                });
              }),
          },
        },
      }
    : {},
});
