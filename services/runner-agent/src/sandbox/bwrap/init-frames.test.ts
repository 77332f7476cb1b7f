import { describe, expect, it } from "vitest";
import { decodeWaitStatus, encodeFrame, FrameReader, HEADER_BYTES, InitProtocolError, MAX_FRAME_BYTES, startPayload, ToInit } from "./init-frames.ts";

/** A frame as the init writes it. */
function fromInit(type: string, id: number, payload: Buffer): Buffer {
  const head = Buffer.alloc(HEADER_BYTES);
  head.write(type, 0, "latin1");
  head.writeUInt32LE(id, 1);
  head.writeUInt32LE(payload.byteLength, 5);
  return Buffer.concat([head, payload]);
}

const u32 = (n: number) => {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(n, 0);
  return b;
};

describe("the init's frames", () => {
  it("reads frames however the pipe splits them", () => {
    const stream = Buffer.concat([fromInit("P", 7, u32(42)), fromInit("O", 7, Buffer.from("hello")), fromInit("E", 7, Buffer.alloc(0)), fromInit("X", 7, u32(3 << 8))]);
    for (const step of [1, 2, 5, 9, 13, stream.length]) {
      const reader = new FrameReader();
      const frames = [];
      for (let at = 0; at < stream.length; at += step) frames.push(...reader.push(stream.subarray(at, at + step)));
      expect(frames.map((f) => [f.type, f.id, f.payload.toString("hex")])).toEqual([
        ["P", 7, u32(42).toString("hex")],
        ["O", 7, Buffer.from("hello").toString("hex")],
        ["E", 7, ""],
        ["X", 7, u32(3 << 8).toString("hex")],
      ]);
    }
  });

  it("refuses what the init may not say: unknown types, oversized frames, fixed frames of the wrong length", () => {
    const bad = [
      fromInit("Q", 1, Buffer.alloc(0)),
      fromInit("S", 1, Buffer.alloc(8)),
      fromInit("P", 1, Buffer.alloc(3)),
      fromInit("X", 1, Buffer.alloc(8)),
      fromInit("C", 1, Buffer.alloc(1)),
    ];
    const huge = Buffer.alloc(HEADER_BYTES);
    huge.write("O", 0, "latin1");
    huge.writeUInt32LE(MAX_FRAME_BYTES + 1, 5);
    bad.push(huge);
    for (const frame of bad) expect(() => new FrameReader().push(frame), frame.subarray(0, 1).toString()).toThrow(InitProtocolError);
  });

  it("encodes starts as argc, envc and NUL-terminated strings, and refuses a NUL inside one", () => {
    const payload = startPayload(["ls", "-l"], { A: "1", B: "x=y" }, "/home/workspace");
    expect(payload.readUInt32LE(0)).toBe(2);
    expect(payload.readUInt32LE(4)).toBe(2);
    expect(payload.subarray(8).toString()).toBe("ls\0-l\0A=1\0B=x=y\0/home/workspace\0");
    expect(() => startPayload(["a\0b"], {}, "/")).toThrow();
    const frame = encodeFrame(ToInit.signal, 9, u32(15));
    expect([frame.toString("latin1", 0, 1), frame.readUInt32LE(1), frame.readUInt32LE(5), frame.readUInt32LE(9)]).toEqual(["K", 9, 4, 15]);
  });

  it("reads wait statuses as exit codes or signals", () => {
    expect(decodeWaitStatus(0)).toEqual({ exitCode: 0, signal: null });
    expect(decodeWaitStatus(127 << 8)).toEqual({ exitCode: 127, signal: null });
    expect(decodeWaitStatus(9)).toEqual({ exitCode: null, signal: 9 });
    expect(decodeWaitStatus(15 | 0x80)).toEqual({ exitCode: null, signal: 15 });
  });
});
