import WebSocket from "ws";
import { ServerFrame } from "@paddock/contracts";

/**
 * Opens the terminal WebSocket with an optional bearer token. Resolves with the
 * hello frame (then closes the socket) or with the refused upgrade's status and
 * JSON body.
 */
export function openTerminal(
  url: string,
  token: string | undefined,
  sessionId: string,
  query: string,
): Promise<{ hello: ServerFrame } | { status: number; body: unknown }> {
  const ws = new WebSocket(`${url.replace(/^http/, "ws")}/v1/sessions/${sessionId}/terminal?${query}`, {
    headers: token !== undefined ? { authorization: `Bearer ${token}` } : {},
  });
  return new Promise((resolve, reject) => {
    ws.once("message", (data: Buffer, isBinary: boolean) => {
      if (isBinary) {
        reject(new Error("binary frame before hello"));
        return;
      }
      const hello = ServerFrame.parse(JSON.parse(data.toString()));
      ws.once("close", () => resolve({ hello }));
      ws.close();
    });
    ws.once("unexpected-response", (_req, res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => {
        const text = Buffer.concat(chunks).toString();
        let body: unknown = text;
        try {
          body = JSON.parse(text);
        } catch {
          // not JSON
        }
        resolve({ status: res.statusCode ?? 0, body });
      });
    });
    ws.once("error", (err) => {
      // A refused upgrade also emits error after unexpected-response in some ws versions; ignore then.
      if (ws.readyState !== WebSocket.CLOSED) reject(err);
    });
  });
}
