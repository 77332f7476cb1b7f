/**
 * The session page's record panels: its apps and their generations, its
 * declared ports with preview links, and its agents with their turns,
 * tokens and lineage (GET /v1/sessions/:id/agents).
 */
import { HttpApi, type Agent, type Session } from "@paddock/contracts";
import { call } from "../api.ts";
import { ago, h, replace } from "../dom.ts";
import { alertBox } from "./ui.ts";

function cells(...values: Array<Node | string | number>): HTMLTableRowElement {
  return h("tr", {}, ...values.map((v) => h("td", {}, v)));
}

function head(...labels: string[]): HTMLTableSectionElement {
  return h("thead", {}, h("tr", {}, ...labels.map((l) => h("th", { scope: "col" }, l))));
}

function when(ms: number | undefined): string {
  return ms === undefined ? "" : `${ago(ms)} ago`;
}

/** The apps of the record (`apps`: one run per app, its current generation). */
export function renderApps(target: HTMLElement, session: Session): void {
  const apps = Object.entries(session.apps ?? {});
  const body = h("tbody", {});
  for (const [name, run] of apps) {
    const ended = run.phase === "running" ? "" : run.exitCode !== undefined && run.exitCode !== null ? `exit ${run.exitCode}` : (run.signal ?? "");
    body.append(
      cells(
        h("code", {}, name),
        run.generation,
        h("span", { class: `badge phase-${run.phase}` }, run.phase),
        run.trigger,
        ended + (run.reason ? ` — ${run.reason}` : ""),
        when(run.startedAt),
      ),
    );
  }
  if (apps.length === 0) body.append(h("tr", { class: "empty" }, h("td", { colspan: 6 }, "No app has run yet.")));
  replace(
    target,
    h("table", { "data-testid": "apps" }, h("caption", { class: "visually-hidden" }, "Apps and their generations"), head("App", "Generation", "Phase", "Trigger", "Ended", "Started"), body),
  );
}

/** Opens a private port through a single-use preview ticket (its one use sets the preview cookie). */
async function openPrivate(sessionId: string, port: number, win: Window | null): Promise<void> {
  const t = await call(HttpApi.createPreviewTicket, { params: { id: sessionId }, body: { port } });
  const url = new URL(t.hostUrl ?? t.url, location.origin).href;
  if (win) win.location.href = url;
  else window.open(url, "_blank", "noopener,noreferrer");
}

/** The declared ports and their preview links. */
export function renderPorts(target: HTMLElement, session: Session): void {
  const ports = session.ports ?? [];
  if (ports.length === 0) {
    replace(target, h("p", { class: "hint" }, "No declared ports."));
    return;
  }
  const alert = alertBox("ports-alert");
  const list = h("ul", { class: "ports", "data-testid": "ports" });
  for (const p of ports) {
    const label = `${p.port}${p.app ? ` (${p.app})` : ""}`;
    if (p.public) {
      const href = new URL(p.url, location.origin).href;
      list.append(h("li", {}, h("a", { href, target: "_blank", rel: "noopener noreferrer", "data-testid": "preview-link" }, `Port ${label}`), " ", h("span", { class: "badge" }, "public")));
    } else {
      const open = h(
        "button",
        {
          type: "button",
          "data-testid": "preview-open",
          onclick: () => {
            // Opened now, while the click still allows a window; pointed at the ticket's URL once it is here.
            const win = window.open("about:blank", "_blank");
            if (win) win.opener = null;
            alert.clear();
            openPrivate(session.id, p.port, win).catch((err: unknown) => {
              win?.close();
              alert.show(err);
            });
          },
        },
        `Open port ${label}`,
      );
      list.append(h("li", {}, open, " ", h("span", { class: "badge" }, "private")));
    }
  }
  replace(target, list, alert.el);
}

function lineage(a: Agent): string {
  return [a.predecessorId ? `after ${a.predecessorId}` : "", a.successorId ? `resumed as ${a.successorId}` : ""].filter((s) => s !== "").join("; ");
}

/** The agents table; refresh() reads them again. */
export function agentsPanel(sessionId: string, signal: AbortSignal): { el: HTMLElement; refresh(): void } {
  const body = h("tbody", {});
  const alert = alertBox("agents-alert");
  const el = h(
    "div",
    {},
    h(
      "table",
      { "data-testid": "agents" },
      h("caption", { class: "visually-hidden" }, "Agents in this session"),
      head("Agent", "Runtime", "Model", "State", "Turn", "Turns", "Tokens", "Lineage", "Declared"),
      body,
    ),
    alert.el,
  );
  let running = false;
  let again = false;
  const refresh = (): void => {
    if (running) {
      again = true;
      return;
    }
    running = true;
    call(HttpApi.listAgents, { params: { id: sessionId }, signal })
      .then(({ agents }) => {
        alert.clear();
        replace(body);
        for (const a of agents) {
          const row = cells(
            h("code", {}, a.id),
            a.runtime,
            a.model ?? "",
            h("span", { class: `badge agent-${a.state}` }, a.state),
            a.turn.state,
            a.turn.count,
            a.usage.tokens,
            lineage(a),
            when(a.declaredAt),
          );
          row.setAttribute("data-testid", "agent-row");
          row.setAttribute("data-agent", a.id);
          body.append(row);
        }
        if (agents.length === 0) body.append(h("tr", { class: "empty" }, h("td", { colspan: 9 }, "No agent has declared itself.")));
      })
      .catch((err: unknown) => {
        if (!signal.aborted) alert.show(err);
      })
      .finally(() => {
        running = false;
        if (again && !signal.aborted) {
          again = false;
          refresh();
        }
      });
  };
  return { el, refresh };
}
