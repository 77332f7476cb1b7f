// The restore worker (fill-worker-host.ts starts it): fetches a restore's
// checkpoint chunks on a NATS connection of its own, opens them and writes
// them into the files the runner opened, so no chunk's bytes reach the
// runner's event loop or its heap (decision 0067). It imports no schema:
// every collection the chunks' memory sets off marks this thread's heap.
import { parentPort, workerData } from "node:worker_threads";
import { connect } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { natsConnectOptions } from "@paddock/bus/nats-options";
import { fetchChunk } from "./chunk-fetch.ts";
import { ChunkFiller } from "./chunk-fill.ts";
import type { FillWorkerData, FromFillWorker, ToFillWorker } from "./fill-worker-host.ts";

const port = parentPort;
if (!port) throw new Error("fill-worker.ts runs as a worker thread");
const data = workerData as FillWorkerData;
const send = (m: FromFillWorker) => port.postMessage(m);

// A first connection that cannot be made fails the fills asked for (each says why), then ends the thread: the next fill starts another.
const connected = connect(natsConnectOptions({ ...data.bus, waitOnFirstConnect: false }));
const filler = connected.then(async (nc) => {
  const jsm = await jetstreamManager(nc);
  return new ChunkFiller((chunk) => fetchChunk(jsm, chunk));
});
filler.catch(() => setImmediate(() => port.close()));

port.on("message", (m: ToFillWorker) => {
  if (m.op === "close") {
    void connected
      .then((nc) => nc.close())
      .catch(() => undefined)
      .finally(() => port.close());
    return;
  }
  filler
    .then((f) => f.fill(m.fd, m.chunks))
    .then(
      () => send({ id: m.id }),
      (err: unknown) => send({ id: m.id, error: err instanceof Error ? err.message : String(err) }),
    );
});
