export { DEFAULT_SCREEN_SIZE, MAX_SCREEN_CELLS, ScreenEmulator, screenSize, type Capture, type ScreenSize } from "./emulator.ts";
export { scanPlainText, type PlainText } from "./plain-text.ts";
