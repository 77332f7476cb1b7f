import { Header, Pax, type HeaderData } from "tar";

/** node-tar's portable mode: owner can always read and write, no group/other write, listable directories. */
export function portableMode(mode: number, isDir: boolean): number {
  let m = ((mode & 0o7777) | 0o600) & ~0o22;
  if (isDir) {
    if (m & 0o400) m |= 0o100;
    if (m & 0o40) m |= 0o10;
    if (m & 0o4) m |= 0o1;
  }
  return m;
}

/** The header block(s) of one entry (a pax record first when the path or link does not fit). */
export function header(data: HeaderData): Buffer {
  const h = new Header(data);
  const needPax = h.encode();
  const block = h.block as Buffer;
  if (!needPax) return block;
  return Buffer.concat([new Pax({ path: data.path, linkpath: data.linkpath, mtime: data.mtime }).encode(), block]);
}
