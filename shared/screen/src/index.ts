export { DEFAULT_SCREEN_SIZE, ScreenEmulator, type ScreenSize } from "./emulator.ts";
export { scanPlainText, type PlainText } from "./plain-text.ts";
