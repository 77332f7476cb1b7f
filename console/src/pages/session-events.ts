/**
 * The session page's audit events: its history and then live, from one
 * follow of `GET /v1/events?sessionId=…&follow=true` (live.ts; a reconnect
 * resumes after the last event received, and events are kept by id besides);
 * the page is told of each live one to re-read what it is about.
 */
import type { AuditEvent } from "@paddock/contracts";
import { h, replace } from "../dom.ts";
import { followEvents, type FollowState } from "../live.ts";
import type { ApiError } from "../api.ts";

const MAX_SHOWN = 200;

function describe(e: AuditEvent): string {
  const parts: string[] = [];
  if (e.run) parts.push(`app ${e.run.app} #${e.run.generation}`);
  if (e.agent) parts.push(`agent ${e.agent.id}${e.agent.turn ? ` turn ${e.agent.turn}` : ""}${e.agent.successorId ? ` → ${e.agent.successorId}` : ""}`);
  if (e.reason) parts.push(`(${e.reason})`);
  return parts.join(" ");
}

export function eventsPanel(
  sessionId: string,
  signal: AbortSignal,
  on: { live(e: AuditEvent): void; state(s: FollowState, err?: ApiError): void },
): { el: HTMLElement } {
  // A scrolling region: focusable, so a keyboard can scroll it.
  const list = h("ol", { class: "events", "data-testid": "session-events", reversed: true, "aria-label": "Events, newest first", tabindex: 0 });
  const seen = new Map<string, AuditEvent>();
  let pending = false;
  const render = () => {
    pending = false;
    const events = [...seen.values()].sort((a, b) => b.at - a.at).slice(0, MAX_SHOWN);
    replace(
      list,
      ...events.map((e) =>
        h(
          "li",
          { "data-testid": "session-event", "data-action": e.action },
          h("time", { datetime: new Date(e.at).toISOString() }, new Date(e.at).toLocaleTimeString()),
          " ",
          h("strong", {}, e.action),
          " by ",
          h("code", {}, e.actorId),
          " ",
          describe(e),
        ),
      ),
    );
    if (events.length === 0) replace(list, h("li", { class: "empty" }, "No events yet."));
  };
  render();
  void followEvents(
    (e, meta) => {
      if (seen.has(e.id)) return;
      seen.set(e.id, e);
      if (seen.size > MAX_SHOWN * 2) {
        const oldest = [...seen.values()].sort((a, b) => a.at - b.at).slice(0, seen.size - MAX_SHOWN);
        for (const o of oldest) seen.delete(o.id);
      }
      // A burst (the replayed history) renders once.
      if (!pending) {
        pending = true;
        setTimeout(render, 50);
      }
      if (meta.live) on.live(e);
    },
    { signal, sessionId, from: "all", onState: on.state },
  );
  return { el: list };
}
