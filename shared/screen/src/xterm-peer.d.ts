/*
 * What @xterm/addon-serialize's typings import from its peer @xterm/xterm,
 * answered by the headless terminal's: the services' program (the root
 * tsconfig maps @xterm/xterm here) must not take in xterm.js's browser
 * typings, which reference the DOM library and would change Node's stream
 * types for every file. The web console (console/tsconfig.json) gets the real one.
 */
export type { Terminal, ITerminalAddon, IMarker, IBufferRange } from "@xterm/headless";
