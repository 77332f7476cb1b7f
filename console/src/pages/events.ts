/**
 * Events: the workspace's audit events (or one session's), newest first,
 * filtered by action and actor, tailed live: one follow of
 * `GET /v1/events?follow=true&startTime=…` sends the events of the chosen
 * window and then streams new ones (live.ts; a reconnect resumes after the
 * last event received). The newest MAX_EVENTS are kept.
 */
import { AuditAction, type AuditEvent } from "@paddock/contracts";
import type { ApiError } from "../api.ts";
import { ago, h } from "../dom.ts";
import { debounce, followEvents, type FollowState } from "../live.ts";
import type { Page } from "../router.ts";
import { filterEvents, mergeEvents } from "./filters.ts";
import { table } from "./table.ts";
import { alertBox, liveIndicator, pageHeader } from "./ui.ts";

const MAX_EVENTS = 1000;
const MINUTE = 60_000;
/** The windows of history the page can open with; the last one is everything retained. */
const WINDOWS: ReadonlyArray<[string, number | undefined]> = [
  ["Last 15 minutes", 15 * MINUTE],
  ["Last hour", 60 * MINUTE],
  ["Last day", 24 * 60 * MINUTE],
  ["Last 7 days", 7 * 24 * 60 * MINUTE],
  ["Everything retained", undefined],
];

function resource(e: AuditEvent): HTMLElement {
  const id = e.resource.kind === "session" ? h("a", { href: `#/sessions/${encodeURIComponent(e.resource.id)}` }, e.resource.id) : h("code", {}, e.resource.id);
  return h("span", {}, h("span", { class: "badge" }, e.resource.kind), " ", id);
}

function detail(e: AuditEvent): string {
  const parts: string[] = [];
  if (e.run) parts.push(`app ${e.run.app} #${e.run.generation} (${e.run.trigger}${e.run.exitCode != null ? `, exit ${e.run.exitCode}` : ""}${e.run.signal ? `, ${e.run.signal}` : ""})`);
  if (e.agent) parts.push(`agent ${e.agent.id}${e.agent.turn ? ` turn ${e.agent.turn}` : ""}${e.agent.successorId ? ` → ${e.agent.successorId}` : ""}`);
  if (e.reason) parts.push(`reason: ${e.reason}`);
  if (e.usage.agentTokenCount) parts.push(`${e.usage.agentTokenCount} tokens`);
  return parts.join("; ");
}

export const eventsPage: Page = (root) => {
  const alert = alertBox();
  const live = liveIndicator();
  const count = h("span", { class: "hint", "data-testid": "event-count", "aria-live": "off" });
  let events = new Map<string, AuditEvent>();
  let pending: AuditEvent[] = [];
  let follow: AbortController | undefined;

  const session = h("input", { id: "filter-session", type: "search", autocomplete: "off", spellcheck: "false", placeholder: "session id", "data-testid": "filter-session" });
  const action = h("select", { id: "filter-action", "data-testid": "filter-action" }, h("option", { value: "" }, "Any action"), ...Object.values(AuditAction).map((a) => h("option", { value: a }, a)));
  const windowSelect = h("select", { id: "filter-window", "data-testid": "filter-window" }, ...WINDOWS.map(([text, ms], i) => h("option", { value: ms === undefined ? "" : String(ms), selected: i === 1 }, text)));
  const actor = h("input", { id: "filter-actor", type: "search", autocomplete: "off", spellcheck: "false", placeholder: "actor id", "data-testid": "filter-actor" });

  const list = table<AuditEvent>({
    testid: "events-table",
    rowTestid: "event-row",
    caption: "Audit events",
    empty: "No events match (yet).",
    id: (e) => e.id,
    sort: { key: "at", dir: "descending" },
    columns: [
      { key: "at", label: "When", value: (e) => e.at, render: (e) => h("time", { datetime: new Date(e.at).toISOString(), title: `${ago(e.at)} ago` }, new Date(e.at).toLocaleString()) },
      { key: "action", label: "Action", value: (e) => e.action, render: (e) => h("span", { class: "badge", "data-testid": "action" }, e.action) },
      { key: "resource", label: "Resource", value: (e) => `${e.resource.kind} ${e.resource.id}`, render: resource },
      { key: "actor", label: "Actor", value: (e) => e.actorId, render: (e) => h("code", { "data-testid": "actor" }, e.actorId) },
      { key: "generation", label: "Gen.", value: (e) => e.placementGeneration },
      { key: "detail", label: "Detail", value: detail, sortable: false },
    ],
  });

  const show = () => {
    const shown = filterEvents([...events.values()], { action: action.value, actor: actor.value });
    list.update(shown);
    count.textContent = `${shown.length} shown of ${events.size} kept (newest ${MAX_EVENTS})`;
  };
  const flush = debounce(() => {
    events = mergeEvents(events, pending, MAX_EVENTS);
    pending = [];
    show();
  }, 100);

  const start = () => {
    follow?.abort();
    flush.cancel();
    events = new Map();
    pending = [];
    show();
    alert.clear();
    const ctl = new AbortController();
    follow = ctl;
    const sessionId = session.value.trim();
    void followEvents(
      (e) => {
        pending.push(e);
        flush();
      },
      {
        signal: ctl.signal,
        from: windowSelect.value ? { startTime: Date.now() - Number(windowSelect.value) } : "all",
        ...(sessionId ? { sessionId } : {}),
        onState: (state: FollowState, error?: ApiError) => {
          if (ctl.signal.aborted) return;
          live.set(state, error);
          if (error && state === "stopped") alert.show(error);
        },
      },
    );
  };

  session.addEventListener("change", start);
  windowSelect.addEventListener("change", start);
  action.addEventListener("change", show);
  actor.addEventListener("input", show);

  root.append(
    pageHeader("Events", live.el, count),
    h(
      "div",
      { class: "filters", role: "search", "aria-label": "Filter events" },
      h("label", { for: "filter-window" }, "Since"),
      windowSelect,
      h("label", { for: "filter-session" }, "Session"),
      session,
      h("label", { for: "filter-action" }, "Action"),
      action,
      h("label", { for: "filter-actor" }, "Actor"),
      actor,
    ),
    h("p", { class: "hint" }, "The window and the session filter ask the API (press Enter or leave the session field); action and actor filter what is shown."),
    alert.el,
    list.el,
  );
  start();
  return () => {
    follow?.abort();
    flush.cancel();
  };
};
