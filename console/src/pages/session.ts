/**
 * One session (`#/sessions/:id`, issue 27 item 2): its header and lifecycle
 * buttons, its terminal (controller by default, "watch only" for a viewer),
 * apps and generations, ports, agents, audit events, diff and files. Live:
 * each audit event of the session re-reads the record and the panels it is
 * about. The unmount stops the follow, the terminal and every request.
 */
import { HttpApi, isTerminal, type AttachMode, type Session } from "@paddock/contracts";
import { call, takeSnapshot } from "../api.ts";
import { ago, h, replace } from "../dom.ts";
import { debounce } from "../live.ts";
import type { Page } from "../router.ts";
import { mountTerminal, type MountedTerminal } from "../terminal/terminal.ts";
import { agentsPanel, renderApps, renderPorts } from "./session-agents.ts";
import { eventsPanel } from "./session-events.ts";
import { diffPanel, filesPanel } from "./session-files.ts";
import { actionButton, alertBox, confirmButton, liveIndicator, statusLine } from "./ui.ts";

const SUSPENDED = new Set(["suspended_warm", "suspended_cold"]);

function section(title: string, id: string, ...content: Node[]): HTMLElement {
  return h("section", { class: "panel", "aria-labelledby": id }, h("h2", { id }, title), ...content);
}

export const sessionPage: Page = (root, params) => {
  // `#/sessions/<id>?mode=viewer` opens it watch-only (ids never hold a "?").
  const [id = "", query = ""] = (params.id ?? "").split("?", 2);
  const asked = new URLSearchParams(query).get("mode");
  const ctl = new AbortController();
  const { signal } = ctl;
  let session: Session | undefined;
  let terminal: MountedTerminal | undefined;
  let terminalState = "";

  const alert = alertBox("session-alert");
  const done = statusLine("session-status");
  const live = liveIndicator();
  const title = h("h1", {}, id);
  const facts = h("dl", { class: "facts" });
  const state = h("span", { class: "badge", "data-testid": "session-state" }, "…");

  const reload = async () => {
    const s = await call(HttpApi.getSession, { params: { id }, signal });
    show(s);
  };
  const suspend = actionButton("Suspend", { testid: "suspend", ariaLabel: "Suspend the session (warm)" }, alert, async () => {
    show(await call(HttpApi.suspendSession, { params: { id }, body: { warm: true } }));
    done.show("Suspending.");
  });
  const resume = actionButton("Resume", { testid: "resume" }, alert, async () => {
    show(await call(HttpApi.resumeSession, { params: { id }, body: {} }));
    done.show("Resuming.");
  });
  const snapshot = actionButton("Snapshot", { testid: "snapshot", ariaLabel: "Checkpoint the workspace" }, alert, async () => {
    const cp = await takeSnapshot(id);
    done.show(`Snapshot taken (${cp.format}).`);
    await reload();
  });
  const recycle = actionButton("Recycle", { testid: "recycle", ariaLabel: "Replace the session by a fresh one from its latest checkpoint" }, alert, async () => {
    const r = await call(HttpApi.recycleSession, { params: { id }, body: {} });
    done.show("Recycled into ", h("a", { href: `#/sessions/${encodeURIComponent(r.session.id)}` }, r.session.name ?? r.session.id), ".");
    show(r.released);
  });
  const del = confirmButton("Delete", { testid: "delete", ariaLabel: "Delete the session", question: "Delete this session?" }, alert, async () => {
    show(await call(HttpApi.deleteSession, { params: { id } }));
    done.show("Deleted.");
  });

  // The terminal: app picker (several apps), watch-only toggle, reattach.
  const appPick = h("select", { id: "terminal-app", "data-testid": "terminal-app", onchange: () => attach() });
  const appField = h("span", { class: "field-inline", hidden: true }, h("label", { for: "terminal-app" }, "App "), appPick);
  const watchOnly = h("input", { type: "checkbox", id: "watch-only", "data-testid": "watch-only", onchange: () => attach() });
  const reattach = h("button", { type: "button", "data-testid": "reattach", onclick: () => attach() }, "Reattach");
  const termBox = h("div", { class: "terminal" });
  let modeChosen = asked === "viewer" || asked === "controller";
  watchOnly.checked = asked === "viewer";
  watchOnly.addEventListener("change", () => (modeChosen = true));

  const attach = () => {
    terminal?.dispose();
    terminal = undefined;
    if (!session) return;
    const mode: AttachMode = watchOnly.checked ? "viewer" : "controller";
    terminal = mountTerminal(termBox, {
      sessionId: id,
      app: appPick.value || undefined,
      mode,
      onState: (s) => (terminalState = s),
    });
  };

  const agents = agentsPanel(id, signal);
  const files = filesPanel(id, signal);
  const diff = diffPanel(id, signal);
  const appsBox = h("div", {});
  const portsBox = h("div", {});

  const show = (s: Session) => {
    const before = session;
    session = s;
    title.textContent = s.name ?? s.id;
    state.textContent = s.state;
    state.className = `badge state-${s.state}`;
    const fact = (k: string, v: Node | string) => [h("dt", {}, k), h("dd", {}, v)];
    replace(
      facts,
      ...fact("Id", h("code", {}, s.id)),
      ...fact("State", state),
      ...fact("Runner", s.runnerId ? h("a", { href: "#/runners" }, s.runnerId) : "not placed"),
      ...fact("Created", `${ago(s.createdAt)} ago`),
      ...(s.error ? fact("Error", s.error) : []),
      ...(s.successorId ? fact("Replaced by", h("a", { href: `#/sessions/${encodeURIComponent(s.successorId)}` }, s.successorId)) : []),
      ...(s.predecessorId ? fact("Replaces", h("a", { href: `#/sessions/${encodeURIComponent(s.predecessorId)}` }, s.predecessorId)) : []),
    );
    const ended = isTerminal(s.state);
    suspend.disabled = s.state !== "running";
    resume.disabled = !SUSPENDED.has(s.state);
    snapshot.disabled = s.state !== "running";
    recycle.disabled = ended;
    for (const b of del.querySelectorAll("button")) b.disabled = ended;
    renderApps(appsBox, s);
    renderPorts(portsBox, s);
    const names = Object.keys(s.apps ?? {});
    if (names.join() !== [...appPick.options].map((o) => o.value).join()) {
      const current = appPick.value;
      replace(appPick, ...names.map((n) => h("option", { value: n, selected: n === current }, n)));
    }
    appField.hidden = names.length < 2;
    if (!before) {
      // A suspended or ended session is watched, not woken, until asked: a controller's attach resumes it.
      if (!modeChosen) watchOnly.checked = ended || SUSPENDED.has(s.state);
      attach();
      files.refresh();
      diff.refresh();
      agents.refresh();
    } else if (before.state !== s.state && s.state === "running") {
      if (terminalState !== "connected" && terminalState !== "connecting" && terminalState !== "reconnecting") attach();
      files.refresh();
      diff.refresh();
    }
  };

  const refreshRecord = debounce(() => void reload().catch((err: unknown) => signal.aborted || alert.show(err)), 200);
  const refreshAgents = debounce(() => agents.refresh(), 200);
  const events = eventsPanel(id, signal, {
    live: (e) => {
      refreshRecord();
      if (e.action.startsWith("agent.")) refreshAgents();
    },
    state: (s, err) => live.set(s, err),
  });

  replace(
    root,
    h("header", { class: "page-head" }, title, live.el),
    facts,
    h("div", { class: "buttons lifecycle", role: "group", "aria-label": "Lifecycle" }, suspend, resume, snapshot, recycle, del),
    done.el,
    alert.el,
    section(
      "Terminal",
      "terminal-h",
      h("div", { class: "terminal-controls" }, appField, h("label", { class: "check" }, watchOnly, " Watch only (read-only viewer)"), reattach),
      termBox,
    ),
    h("div", { class: "panels" }, section("Apps", "apps-h", appsBox), section("Ports", "ports-h", portsBox)),
    section("Agents", "agents-h", agents.el),
    section("Files", "files-h", files.el),
    section("Diff", "diff-h", diff.el),
    section("Events", "events-h", events.el),
  );

  reload().catch((err: unknown) => {
    if (!signal.aborted) alert.show(err);
  });

  return () => {
    ctl.abort();
    refreshRecord.cancel();
    refreshAgents.cancel();
    terminal?.dispose();
  };
};
