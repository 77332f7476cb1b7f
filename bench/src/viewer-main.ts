// A terminal viewer in its own OS process (a person watching a stream in
// another browser): `node --import tsx bench/src/viewer-main.ts '<url>' '<token>'`.
// Reads every frame; prints "flowing <bytes>" once 4 MB have come, then
// "read <bytes>" and exits when its stdin closes.
import WebSocket from "ws";

const [url, token] = process.argv.slice(2);
if (!url || !token) {
  process.stderr.write("viewer-main: expected the terminal URL and a token\n");
  process.exit(2);
}
const ws = new WebSocket(url, { headers: { authorization: `Bearer ${token}` } });
let bytes = 0;
let flowing = false;
ws.on("message", (data: Buffer, isBinary: boolean) => {
  if (!isBinary) return;
  bytes += data.byteLength;
  if (!flowing && bytes >= 4 * 1024 * 1024) {
    flowing = true;
    process.stdout.write(`flowing ${bytes}\n`);
  }
});
ws.on("error", (err) => {
  process.stderr.write(`viewer-main: ${err.message}\n`);
  process.exit(1);
});
const stop = () => {
  process.stdout.write(`read ${bytes}\n`);
  ws.terminate();
  process.exit(0);
};
process.stdin.on("end", stop);
process.stdin.resume();
