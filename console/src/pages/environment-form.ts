/**
 * The environment form, for a new environment (POST) or an existing one
 * (PATCH: every shown field is sent, "" and [] clearing). What the API
 * refuses is shown next to the field it names (forms.ts).
 */
import { HttpApi, type CreateEnvironmentBody, type Environment, type UpdateEnvironmentBody } from "@paddock/contracts";
import { call } from "../api.ts";
import { h, replace } from "../dom.ts";
import { clearFormErrors, field, listOf, showFormError, type Field } from "./forms.ts";
import { alertBox, busy } from "./ui.ts";

const FORM = "environment";

export interface EnvironmentForm {
  readonly el: HTMLElement;
  /** Fills the form with `env` to edit it, or empties it for a new one. */
  edit(env: Environment | undefined): void;
}

function seconds(text: string): number | undefined {
  const t = text.trim();
  return t === "" ? undefined : Number(t);
}

export function environmentForm(onSaved: (env: Environment, created: boolean) => void): EnvironmentForm {
  const alert = alertBox("environment-alert");
  const text = (testid: string, attrs: Record<string, string | number> = {}) => h("input", { type: "text", autocomplete: "off", spellcheck: "false", "data-testid": testid, ...attrs });
  const area = (testid: string, rows = 3) => h("textarea", { rows, spellcheck: "false", "data-testid": testid });
  const num = (testid: string) => h("input", { type: "number", min: 1, step: 1, inputmode: "numeric", "data-testid": testid });

  const name = field(FORM, "name", "Name", text("env-name", { maxlength: 128 }));
  const image = field(FORM, "image", "Image (optional)", text("env-image", { placeholder: "docker.io/library/debian:12" }), "An image reference a runner can pull; empty for the runner's default.");
  const setup = field(FORM, "setup", "Setup script (optional)", area("env-setup", 4), "Runs once per setup (snapshotted); shell script.");
  const init = field(FORM, "init", "Init script (optional)", area("env-init"), "Runs on every boot, after setup.");
  const egress = field(FORM, "egressAllow", "Egress allowed to (optional)", area("env-egress"), "Host names, one per line (or comma separated).");
  const secrets = field(FORM, "secretRefs", "Secrets (optional)", text("env-secrets"), "Secret names, comma separated (admins only).");
  const setupTimeout = field(FORM, "setupTimeoutSec", "Setup timeout, seconds (optional)", num("env-setup-timeout"));
  const initTimeout = field(FORM, "initTimeoutSec", "Init timeout, seconds (optional)", num("env-init-timeout"));
  const fields: Field[] = [name, image, setup, init, egress, secrets, setupTimeout, initTimeout];

  const title = h("h2", { id: "environment-form-title" }, "New environment");
  const submit: HTMLButtonElement = h("button", { type: "submit", "data-testid": "env-submit" }, "Create environment");
  const cancel: HTMLButtonElement = h("button", { type: "button", "data-testid": "env-cancel", hidden: true, onclick: () => form.edit(undefined) }, "Cancel edit");
  let editing: Environment | undefined;

  const onsubmit = (ev: Event) => {
    ev.preventDefault();
    clearFormErrors(fields);
    const common = {
      setup: setup.control.value,
      init: init.control.value,
      egressAllow: listOf(egress.control.value),
      secretRefs: listOf(secrets.control.value),
      setupTimeoutSec: seconds(setupTimeout.control.value),
      initTimeoutSec: seconds(initTimeout.control.value),
    };
    const target = editing;
    void busy([submit, cancel], alert, async () => {
      try {
        if (target) {
          const body: UpdateEnvironmentBody = { ...common, name: name.control.value, image: image.control.value.trim() };
          const saved = await call(HttpApi.updateEnvironment, { params: { id: target.id }, body });
          onSaved(saved, false);
        } else {
          const img = image.control.value.trim();
          const body: CreateEnvironmentBody = {
            name: name.control.value,
            ...(img ? { image: img } : {}),
            ...(common.setup ? { setup: common.setup } : {}),
            ...(common.init ? { init: common.init } : {}),
            ...(common.egressAllow.length ? { egressAllow: common.egressAllow } : {}),
            ...(common.secretRefs.length ? { secretRefs: common.secretRefs } : {}),
            ...(common.setupTimeoutSec !== undefined ? { setupTimeoutSec: common.setupTimeoutSec } : {}),
            ...(common.initTimeoutSec !== undefined ? { initTimeoutSec: common.initTimeoutSec } : {}),
          };
          const saved = await call(HttpApi.createEnvironment, { body });
          onSaved(saved, true);
        }
        form.edit(undefined);
      } catch (err) {
        showFormError(err, fields, alert);
      }
    });
  };

  const el = h(
    "form",
    { class: "inline-form", "aria-labelledby": "environment-form-title", "data-testid": "environment-form", novalidate: true, onsubmit },
    title,
    h("div", { class: "fields" }, ...fields.map((f) => f.el)),
    h("div", { class: "form-actions" }, submit, " ", cancel),
    alert.el,
  );

  const form: EnvironmentForm = {
    el,
    edit(env) {
      editing = env;
      clearFormErrors(fields);
      alert.clear();
      name.control.value = env?.name ?? "";
      image.control.value = env?.image ?? "";
      setup.control.value = env?.setup ?? "";
      init.control.value = env?.init ?? "";
      egress.control.value = env?.egressAllow.join("\n") ?? "";
      secrets.control.value = env?.secretRefs.join(", ") ?? "";
      setupTimeout.control.value = env?.setupTimeoutSec?.toString() ?? "";
      initTimeout.control.value = env?.initTimeoutSec?.toString() ?? "";
      replace(title, env ? `Edit ${env.name}` : "New environment");
      replace(submit, env ? "Save changes" : "Create environment");
      cancel.hidden = !env;
      el.setAttribute("data-mode", env ? "edit" : "create");
      if (env) name.control.focus();
    },
  };
  form.edit(undefined);
  return form;
}
