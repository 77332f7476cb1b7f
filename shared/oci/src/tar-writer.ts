// A minimal ustar writer for building image layers in tests and benchmarks. It
// writes exactly the headers it is given, hostile ones included (`..`, absolute
// names, device nodes), which is the point: a library writer would sanitise them.

export const TarType = {
  file: "0",
  hardlink: "1",
  symlink: "2",
  char: "3",
  block: "4",
  dir: "5",
  fifo: "6",
} as const;
export type TarType = (typeof TarType)[keyof typeof TarType];

export interface TarEntry {
  /** Name as written; `/` is appended for directories. */
  path: string;
  type: keyof typeof TarType;
  /** Permission bits; 0o755 for directories and 0o644 otherwise by default. */
  mode?: number;
  content?: Uint8Array | string;
  /** Target of a symlink or hardlink. */
  linkname?: string;
  uid?: number;
  gid?: number;
  devmajor?: number;
  devminor?: number;
}

const BLOCK = 512;

function putString(buf: Buffer, offset: number, length: number, value: string): void {
  const bytes = Buffer.from(value, "utf8");
  if (bytes.length > length) throw new Error(`tar field too long (${bytes.length} > ${length}): ${value}`);
  bytes.copy(buf, offset);
}

function putOctal(buf: Buffer, offset: number, length: number, value: number): void {
  putString(buf, offset, length, value.toString(8).padStart(length - 1, "0") + "\0");
}

/** Splits a long name into ustar prefix (≤155) and name (≤100) at a slash. */
function splitName(path: string): { prefix: string; name: string } {
  if (Buffer.byteLength(path) <= 100) return { prefix: "", name: path };
  for (let i = path.lastIndexOf("/"); i > 0; i = path.lastIndexOf("/", i - 1)) {
    const prefix = path.slice(0, i);
    const name = path.slice(i + 1);
    if (Buffer.byteLength(prefix) <= 155 && Buffer.byteLength(name) <= 100) return { prefix, name };
  }
  throw new Error(`tar path too long for ustar: ${path}`);
}

function header(entry: TarEntry, size: number): Buffer {
  const buf = Buffer.alloc(BLOCK);
  const path = entry.type === "dir" && !entry.path.endsWith("/") ? `${entry.path}/` : entry.path;
  const { prefix, name } = splitName(path);
  putString(buf, 0, 100, name);
  putOctal(buf, 100, 8, entry.mode ?? (entry.type === "dir" ? 0o755 : 0o644));
  putOctal(buf, 108, 8, entry.uid ?? 0);
  putOctal(buf, 116, 8, entry.gid ?? 0);
  putOctal(buf, 124, 12, size);
  putOctal(buf, 136, 12, 0);
  buf.fill(0x20, 148, 156);
  putString(buf, 156, 1, TarType[entry.type]);
  putString(buf, 157, 100, entry.linkname ?? "");
  putString(buf, 257, 6, "ustar\0");
  putString(buf, 263, 2, "00");
  putOctal(buf, 329, 8, entry.devmajor ?? 0);
  putOctal(buf, 337, 8, entry.devminor ?? 0);
  putString(buf, 345, 155, prefix);
  let sum = 0;
  for (const byte of buf) sum += byte;
  putString(buf, 148, 8, sum.toString(8).padStart(6, "0") + "\0 ");
  return buf;
}

/** The whole archive (entries, then two zero blocks) in one buffer. */
export function writeTar(entries: readonly TarEntry[]): Buffer {
  const parts: Buffer[] = [];
  for (const entry of entries) {
    const content = entry.type === "file" && entry.content !== undefined ? Buffer.from(entry.content) : Buffer.alloc(0);
    parts.push(header(entry, content.length), content);
    const pad = (BLOCK - (content.length % BLOCK)) % BLOCK;
    if (pad > 0) parts.push(Buffer.alloc(pad));
  }
  parts.push(Buffer.alloc(BLOCK * 2));
  return Buffer.concat(parts);
}
