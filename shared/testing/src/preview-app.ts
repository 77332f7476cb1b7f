/**
 * The web app the preview tests, the chaos preview case and the preview
 * bench run inside sessions (fixtures/preview-app.cjs: HTTP and a WebSocket
 * echo on 127.0.0.1). A session cannot see the repository wherever it is
 * checked out (a clone under /tmp is behind the session's own /tmp), so the
 * app is put into its workspace through the files API and its command waits
 * for it there.
 */
import { fileURLToPath } from "node:url";
import { readFileSync } from "node:fs";
import type { PortSpec } from "@paddock/contracts";

/** The app's file on this host (for a direct baseline run outside any session). */
export const PREVIEW_APP_PATH = fileURLToPath(new URL("./fixtures/preview-app.cjs", import.meta.url));
const IN_WORKSPACE = "preview-app.cjs";

/** An app spec that runs the preview app on ports once it is in the workspace (putPreviewApp). */
export function previewAppSpec(name: string, ports: readonly PortSpec[]): { name: string; cmd: string[]; tty: false; ports: PortSpec[] } {
  const numbers = ports.map((p) => String(p.port)).join(" ");
  return { name, cmd: ["sh", "-c", `while [ ! -f ${IN_WORKSPACE} ]; do sleep 0.05; done; exec node ${IN_WORKSPACE} ${numbers}`], tty: false, ports: [...ports] };
}

/** Puts the app into a running session's workspace (one atomic file write: the waiting command sees it whole). */
export async function putPreviewApp(gatewayUrl: string, token: string, sessionId: string): Promise<void> {
  const res = await fetch(`${gatewayUrl}/v1/sessions/${sessionId}/files?path=${IN_WORKSPACE}`, { method: "PUT", headers: { authorization: `Bearer ${token}` }, body: readFileSync(PREVIEW_APP_PATH) });
  if (res.status !== 200) throw new Error(`putting the preview app answered ${res.status}: ${await res.text()}`);
}

/**
 * The body of url once it answers 200 (an app that is still starting answers
 * 502 meanwhile): asked again every 100 ms, at most attempts times, then an error.
 */
export async function untilAnswers(url: string, init: RequestInit = {}, attempts = 600): Promise<string> {
  for (let i = 0; i < attempts; i++) {
    const res = await fetch(url, init).catch(() => undefined);
    const text = await res?.text().catch(() => undefined);
    if (res?.status === 200 && text !== undefined) return text;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${url} never answered 200`);
}
