/**
 * Environments: the workspace's environments; created, edited and deleted
 * here, with the API's validation messages next to the form's fields. Kept
 * current from the audit stream (environment events).
 */
import { HttpApi, type Environment } from "@paddock/contracts";
import { call } from "../api.ts";
import { ago, h } from "../dom.ts";
import { liveRefresh } from "../live.ts";
import type { Page } from "../router.ts";
import { environmentForm } from "./environment-form.ts";
import { allEnvironments } from "./lists.ts";
import { table } from "./table.ts";
import { alertBox, confirmButton, liveIndicator, pageHeader, statusLine } from "./ui.ts";

export const environmentsPage: Page = (root) => {
  const ctl = new AbortController();
  const alert = alertBox();
  const status = statusLine();
  const live = liveIndicator();

  const form = environmentForm((env, created) => {
    status.show(`${created ? "Created" : "Saved"} ${env.name} (${env.id})`);
    void refresh();
  });

  const list = table<Environment>({
    testid: "environments-table",
    rowTestid: "environment-row",
    caption: "Environments",
    empty: "No environments yet: create one below.",
    id: (e) => e.id,
    sort: { key: "name", dir: "ascending" },
    columns: [
      { key: "name", label: "Name", value: (e) => e.name },
      { key: "id", label: "Id", value: (e) => e.id, render: (e) => h("code", {}, e.id) },
      { key: "image", label: "Image", value: (e) => e.image ?? "—" },
      { key: "setup", label: "Setup", value: (e) => (e.setup ? `${e.setup.split("\n").length} lines` : "—") },
      { key: "egress", label: "Egress", value: (e) => (e.egressAllow.length ? e.egressAllow.join(", ") : "—") },
      { key: "updated", label: "Updated", value: (e) => -e.updatedAt, render: (e) => `${ago(e.updatedAt)} ago` },
    ],
    signature: (e) => `${e.name}:${e.updatedAt}`,
    actions: (e) =>
      h(
        "span",
        { class: "buttons" },
        h(
          "button",
          {
            type: "button",
            "data-testid": "edit",
            "aria-label": `Edit ${e.name}`,
            onclick: () => {
              const latest = environments.find((x) => x.id === e.id) ?? e;
              form.edit(latest);
              form.el.scrollIntoView({ block: "nearest" });
            },
          },
          "Edit",
        ),
        " ",
        confirmButton("Delete", { testid: "delete", ariaLabel: `Delete ${e.name}`, question: `Delete ${e.name}?` }, alert, async () => {
          await call(HttpApi.deleteEnvironment, { params: { id: e.id } });
          status.show(`Deleted ${e.name}`);
          void refresh();
        }),
      ),
  });

  let environments: Environment[] = [];
  let loading = false;
  let again = false;
  const refresh = async () => {
    if (loading) return void (again = true);
    loading = true;
    try {
      environments = await allEnvironments(ctl.signal);
      list.update(environments);
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

  root.append(pageHeader("Environments", live.el), alert.el, status.el, list.el, form.el);
  void refresh();
  const stopFollow = liveRefresh({ environment: () => void refresh() }, { onState: live.set });
  return () => {
    ctl.abort();
    stopFollow();
  };
};
