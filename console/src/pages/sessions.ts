/**
 * Sessions: the workspace's sessions (name, state, runner, age), filtered by
 * state and text, with ended ones on request; created from an environment;
 * suspended, resumed, snapshotted, recycled and deleted from their rows.
 * Kept current from the audit stream (live.ts).
 */
import { HttpApi, SessionState, type Environment, type Session } from "@paddock/contracts";
import { call, takeSnapshot } from "../api.ts";
import { ago, h } from "../dom.ts";
import { liveRefresh } from "../live.ts";
import type { Page } from "../router.ts";
import { filterSessions, sessionActions, type SessionAction } from "./filters.ts";
import { allEnvironments, allSessions } from "./lists.ts";
import { createSessionForm } from "./session-create.ts";
import { table } from "./table.ts";
import { actionButton, alertBox, confirmButton, liveIndicator, pageHeader, statusLine } from "./ui.ts";

function sessionLink(s: Session): HTMLElement {
  return h("a", { href: `#/sessions/${encodeURIComponent(s.id)}`, "data-testid": "session-link" }, s.name ?? s.id, s.name ? h("span", { class: "id" }, ` ${s.id}`) : null);
}

export function stateBadge(state: string): HTMLElement {
  return h("span", { class: `badge state state-${state}`, "data-testid": "state" }, state.replace("_", " "));
}

export const sessionsPage: Page = (root) => {
  const ctl = new AbortController();
  const alert = alertBox();
  const status = statusLine();
  const live = liveIndicator();
  let sessions: Session[] = [];
  let envNames = new Map<string, string>();

  const stateSel = h("select", { id: "filter-state", "data-testid": "filter-state" }, h("option", { value: "" }, "Any state"), ...Object.values(SessionState).map((s) => h("option", { value: s }, s.replace("_", " "))));
  const search = h("input", { id: "filter-text", type: "search", autocomplete: "off", placeholder: "name or id", "data-testid": "filter-text" });
  const ended = h("input", { id: "filter-ended", type: "checkbox", "data-testid": "filter-ended" });

  const act = (s: Session, a: SessionAction): Promise<unknown> => {
    const params = { id: s.id };
    switch (a) {
      case "suspend-warm":
        return call(HttpApi.suspendSession, { params, body: { warm: true } }).then(refreshSoon);
      case "suspend-cold":
        return call(HttpApi.suspendSession, { params, body: { warm: false } }).then(refreshSoon);
      case "resume":
        return call(HttpApi.resumeSession, { params, body: {} }).then(refreshSoon);
      case "snapshot":
        return takeSnapshot(s.id).then((c) => status.show(`Snapshot of ${s.name ?? s.id} taken: ${c.ref}`));
      case "recycle":
        return call(HttpApi.recycleSession, { params, body: {} }).then((r) => {
          status.show("Recycled; the new session is ", sessionLink(r.session));
          refreshSoon();
        });
      case "delete":
        return call(HttpApi.deleteSession, { params }).then(refreshSoon);
    }
  };

  const LABEL: Record<SessionAction, string> = {
    "suspend-warm": "Suspend (warm)",
    "suspend-cold": "Suspend (cold)",
    resume: "Resume",
    snapshot: "Snapshot",
    recycle: "Recycle",
    delete: "Delete",
  };
  const TESTID: Record<SessionAction, string> = { "suspend-warm": "suspend", "suspend-cold": "suspend-cold", resume: "resume", snapshot: "snapshot", recycle: "recycle", delete: "delete" };

  const rowActions = (s: Session) => {
    const who = s.name ?? s.id;
    return h(
      "span",
      { class: "buttons" },
      ...sessionActions(s.state).map((a) =>
        a === "delete"
          ? confirmButton(LABEL[a], { testid: TESTID[a], ariaLabel: `Delete ${who}`, question: `Delete ${who}?` }, alert, () => act(s, a))
          : actionButton(LABEL[a], { testid: TESTID[a], ariaLabel: `${LABEL[a]} ${who}` }, alert, () => act(s, a)),
      ),
    );
  };

  const list = table<Session>({
    testid: "sessions-table",
    rowTestid: "session-row",
    caption: "Sessions",
    empty: "No sessions match.",
    id: (s) => s.id,
    sort: { key: "age", dir: "ascending" },
    columns: [
      { key: "name", label: "Name", value: (s) => s.name ?? s.id, render: sessionLink },
      { key: "state", label: "State", value: (s) => s.state, render: (s) => stateBadge(s.state) },
      { key: "environment", label: "Environment", value: (s) => (s.environmentId ? (envNames.get(s.environmentId) ?? s.environmentId) : "—") },
      { key: "runner", label: "Runner", value: (s) => s.runnerId ?? "—" },
      { key: "age", label: "Age", value: (s) => -s.createdAt, render: (s) => h("time", { datetime: new Date(s.createdAt).toISOString(), title: new Date(s.createdAt).toLocaleString() }, ago(s.createdAt)) },
    ],
    signature: (s) => `${s.state}:${s.name ?? ""}`,
    actions: rowActions,
  });

  const show = () => list.update(filterSessions(sessions, { state: stateSel.value as SessionState | "", text: search.value }));

  let loading = false;
  let again = false;
  const refresh = async () => {
    if (loading) return void (again = true);
    loading = true;
    try {
      sessions = await allSessions(ended.checked, ctl.signal);
      show();
      alert.clear();
    } catch (err) {
      if (!ctl.signal.aborted) alert.show(err);
    } finally {
      loading = false;
      if (again && !ctl.signal.aborted) {
        again = false;
        void refresh();
      }
    }
  };
  const refreshSoon = () => void refresh();

  const form = createSessionForm((s) => {
    status.show("Created ", sessionLink(s));
    refreshSoon();
  });
  const loadEnvironments = async () => {
    try {
      const envs: Environment[] = await allEnvironments(ctl.signal);
      envNames = new Map(envs.map((e) => [e.id, e.name]));
      form.setEnvironments(envs);
    } catch (err) {
      if (!ctl.signal.aborted) alert.show(err);
    }
  };

  stateSel.addEventListener("change", show);
  search.addEventListener("input", show);
  ended.addEventListener("change", refreshSoon);

  root.append(
    pageHeader("Sessions", live.el),
    h(
      "div",
      { class: "filters", role: "search", "aria-label": "Filter sessions" },
      h("label", { for: "filter-state" }, "State"),
      stateSel,
      h("label", { for: "filter-text" }, "Search"),
      search,
      h("span", { class: "check" }, ended, h("label", { for: "filter-ended" }, "Include ended")),
    ),
    alert.el,
    status.el,
    list.el,
    form.el,
  );

  void refresh();
  void loadEnvironments();
  const stopFollow = liveRefresh({ session: refreshSoon, environment: () => void loadEnvironments() }, { onState: live.set });
  // Ages move on without events.
  const tick = setInterval(show, 30_000);
  return () => {
    ctl.abort();
    stopFollow();
    clearInterval(tick);
  };
};
