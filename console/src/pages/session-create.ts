/** The sessions page's create form: an environment, an optional name, a command. */
import { HttpApi, type CreateSessionBody, type Environment, type Session } from "@paddock/contracts";
import { call } from "../api.ts";
import { h, replace } from "../dom.ts";
import { field, showFormError, splitCommand, clearFormErrors } from "./forms.ts";
import { alertBox, busy } from "./ui.ts";

const FORM = "create-session";

export interface CreateSessionForm {
  readonly el: HTMLElement;
  /** Puts the workspace's environments in the select (keeping the choice when it is still there). */
  setEnvironments(envs: readonly Environment[]): void;
}

export function createSessionForm(onCreated: (s: Session) => void): CreateSessionForm {
  const alert = alertBox("create-session-alert");
  const env = field(FORM, "environmentId", "Environment", h("select", { "data-testid": "create-environment" }));
  const name = field(FORM, "name", "Name (optional)", h("input", { type: "text", autocomplete: "off", "data-testid": "create-name", maxlength: 128 }), "Letters, digits, dot, dash and underscore.");
  const cmd = field(
    FORM,
    "spec",
    "Command (optional)",
    h("input", { type: "text", autocomplete: "off", spellcheck: "false", "data-testid": "create-command", placeholder: "/bin/sh -l" }),
    "Split into words like a shell line (quotes group words; nothing is expanded). Empty: the environment's or the default command.",
  );
  const fields = [env, name, cmd];
  const submit: HTMLButtonElement = h("button", { type: "submit", "data-testid": "create-submit" }, "Create session");

  const onsubmit = (ev: Event) => {
    ev.preventDefault();
    clearFormErrors(fields);
    let argv: string[];
    try {
      argv = splitCommand(cmd.control.value);
    } catch (err) {
      cmd.setError(err instanceof Error ? err.message : String(err));
      cmd.control.focus();
      return;
    }
    const body: CreateSessionBody = {
      spec: argv.length > 0 ? { cmd: argv } : {},
      ...(env.control.value ? { environmentId: env.control.value } : {}),
      ...(name.control.value.trim() ? { name: name.control.value.trim() } : {}),
    };
    void busy([submit], alert, async () => {
      try {
        const created = await call(HttpApi.createSession, { body });
        name.control.value = "";
        onCreated(created);
      } catch (err) {
        showFormError(err, fields, alert);
      }
    });
  };

  const el = h(
    "form",
    { class: "inline-form", "aria-label": "Create a session", "data-testid": "create-session-form", onsubmit },
    h("h2", {}, "New session"),
    h("div", { class: "fields" }, ...fields.map((f) => f.el)),
    h("div", { class: "form-actions" }, submit),
    alert.el,
  );

  let filled = false;
  return {
    el,
    setEnvironments(envs) {
      const chosen = filled ? env.control.value : (envs[0]?.id ?? "");
      filled = true;
      replace(
        env.control,
        h("option", { value: "" }, "(none: the default image)"),
        ...[...envs].sort((a, b) => a.name.localeCompare(b.name)).map((e) => h("option", { value: e.id }, `${e.name} (${e.id})`)),
      );
      env.control.value = envs.some((e) => e.id === chosen) ? chosen : "";
    },
  };
}
