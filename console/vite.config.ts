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
});
