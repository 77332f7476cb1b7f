/**
 * Runners: the fleet's runners (state, capacity used of total, capabilities)
 * with drain, cordon and uncordon for fleet operators; anyone else sees the
 * API's 403 message. The list is the runners feed (`GET /v1/runners?follow=true`,
 * feeds.ts): every record change (state, capacity) and lease renewal is pushed.
 */
import { HttpApi, type Runner } from "@paddock/contracts";
import { call } from "../api.ts";
import { ago, h } from "../dom.ts";
import { followRecords, runnersFeed } from "../feeds.ts";
import type { Page } from "../router.ts";
import { runnerActions, type RunnerAction } from "./filters.ts";
import { table } from "./table.ts";
import { actionButton, alertBox, liveIndicator, pageHeader, statusLine } from "./ui.ts";

const LABEL: Record<RunnerAction, string> = { drain: "Drain", cordon: "Cordon", uncordon: "Uncordon" };
const ROUTE = { drain: HttpApi.drainRunner, cordon: HttpApi.cordonRunner, uncordon: HttpApi.uncordonRunner } as const;

function capacity(r: Runner): HTMLElement {
  const label = `${r.capacityUsed} of ${r.capacityTotal} slots used`;
  return h(
    "span",
    { class: "capacity", "data-testid": "capacity" },
    h("meter", { min: 0, max: Math.max(1, r.capacityTotal), value: r.capacityUsed, "aria-label": label }),
    ` ${r.capacityUsed} / ${r.capacityTotal}`,
  );
}

function capabilities(r: Runner): HTMLElement {
  return h("span", { class: "tags" }, ...(r.capabilities.length ? r.capabilities.map((c) => h("span", { class: "badge" }, c)) : ["—"]));
}

export const runnersPage: Page = (root) => {
  const ctl = new AbortController();
  const alert = alertBox();
  const status = statusLine();
  const live = liveIndicator();
  let runners: Runner[] = [];

  const act = async (r: Runner, a: RunnerAction) => {
    const updated = await call(ROUTE[a], { params: { id: r.id }, body: {} });
    runners = runners.map((x) => (x.id === updated.id ? updated : x));
    list.update(runners);
    status.show(`${r.id}: ${updated.state}`);
  };

  const list = table<Runner>({
    testid: "runners-table",
    rowTestid: "runner-row",
    caption: "Runners",
    empty: "No runners have registered.",
    id: (r) => r.id,
    sort: { key: "id", dir: "ascending" },
    columns: [
      { key: "id", label: "Runner", value: (r) => r.id },
      { key: "pool", label: "Pool", value: (r) => r.poolId },
      { key: "state", label: "State", value: (r) => r.state, render: (r) => h("span", { class: `badge state runner-${r.state}`, "data-testid": "state", title: r.lostReason }, r.state) },
      { key: "capacity", label: "Capacity", value: (r) => r.capacityUsed / Math.max(1, r.capacityTotal), render: capacity },
      { key: "capabilities", label: "Capabilities", value: (r) => r.capabilities.join(" "), render: capabilities },
      { key: "seen", label: "Last seen", value: (r) => -r.lastSeenAt, render: (r) => `${ago(r.lastSeenAt)} ago` },
    ],
    signature: (r) => r.state,
    actions: (r) =>
      h(
        "span",
        { class: "buttons" },
        ...runnerActions(r.state).map((a) => actionButton(LABEL[a], { testid: a, ariaLabel: `${LABEL[a]} ${r.id}`, danger: a !== "uncordon" }, alert, () => act(r, a))),
      ),
  });

  root.append(
    pageHeader("Runners", live.el),
    h("p", { class: "hint" }, "Drain: no new sessions, its sessions move away. Cordon: no new sessions, its sessions stay. Fleet operators only."),
    alert.el,
    status.el,
    list.el,
  );
  void followRecords(
    runnersFeed,
    (records) => {
      runners = [...records.values()];
      list.update(runners);
    },
    {
      signal: ctl.signal,
      onState: (state, error) => {
        live.set(state, error);
        if (error && state === "stopped") alert.show(error);
      },
    },
  );
  return () => ctl.abort();
};
