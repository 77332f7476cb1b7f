/**
 * Tokens: the caller's own API tokens (never a value); a new one is shown
 * once, with a copy button; revoked with a confirm step. The list is the
 * tokens feed (`GET /v1/tokens?follow=true`, feeds.ts): tokens minted or
 * revoked anywhere (another tab, the CLI) are pushed.
 */
import { HttpApi, type CreateTokenBody, type CreatedToken, type TokenInfo } from "@paddock/contracts";
import { call } from "../api.ts";
import { ago, h, replace } from "../dom.ts";
import { followRecords, tokensFeed } from "../feeds.ts";
import type { Page } from "../router.ts";
import { field } from "./forms.ts";
import { table } from "./table.ts";
import { alertBox, busy, confirmButton, liveIndicator, pageHeader, statusLine } from "./ui.ts";

const DAY = 86_400_000;
const LIFETIMES: ReadonlyArray<[string, number | undefined]> = [
  ["Never expires", undefined],
  ["1 hour", 3_600_000],
  ["1 day", DAY],
  ["7 days", 7 * DAY],
  ["30 days", 30 * DAY],
  ["90 days", 90 * DAY],
  ["1 year", 365 * DAY],
];

/** The new token, shown once: a read-only field, a copy button, and a button that hides it for good. */
function revealed(t: CreatedToken, onDone: () => void): HTMLElement {
  const value = h("input", { id: "new-token", type: "text", readonly: true, value: t.token, "data-testid": "new-token", spellcheck: "false", autocomplete: "off" });
  const copied = h("span", { role: "status", class: "hint", "data-testid": "copied" });
  const copy = async () => {
    try {
      await navigator.clipboard.writeText(t.token);
      copied.textContent = "Copied.";
    } catch {
      value.select();
      copied.textContent = "Could not reach the clipboard: the value is selected, copy it with Ctrl+C.";
    }
  };
  return h(
    "section",
    { class: "reveal", "aria-labelledby": "new-token-title", "data-testid": "token-reveal" },
    h("h2", { id: "new-token-title" }, `New token${t.label ? `: ${t.label}` : ""}`),
    h("p", {}, "This is the only time the token is shown. Copy it now."),
    h("label", { for: "new-token" }, "Token value"),
    h("div", { class: "row" }, value, h("button", { type: "button", "data-testid": "copy-token", onclick: () => void copy() }, "Copy"), copied),
    h("button", { type: "button", "data-testid": "dismiss-token", onclick: onDone }, "I have copied it"),
  );
}

export const tokensPage: Page = (root) => {
  const ctl = new AbortController();
  const alert = alertBox();
  const status = statusLine();
  const reveal = h("div");

  const list = table<TokenInfo>({
    testid: "tokens-table",
    rowTestid: "token-row",
    caption: "Your tokens",
    empty: "No tokens listed.",
    id: (t) => t.id,
    sort: { key: "created", dir: "ascending" },
    columns: [
      { key: "label", label: "Label", value: (t) => t.label ?? "—" },
      { key: "id", label: "Id", value: (t) => t.id, render: (t) => h("code", {}, t.id) },
      { key: "actor", label: "Actor", value: (t) => `${t.actor.kind} ${t.actor.id}` },
      { key: "created", label: "Created", value: (t) => -t.createdAt, render: (t) => `${ago(t.createdAt)} ago` },
      { key: "expires", label: "Expires", value: (t) => t.expiresAt ?? Number.MAX_SAFE_INTEGER, render: (t) => (t.expiresAt ? new Date(t.expiresAt).toLocaleString() : "never") },
    ],
    signature: (t) => t.label ?? "",
    actions: (t) =>
      confirmButton("Revoke", { testid: "revoke", ariaLabel: `Revoke ${t.label ?? t.id}`, question: `Revoke ${t.label ?? t.id}? Streams it opened close.` }, alert, async () => {
        await call(HttpApi.revokeToken, { params: { id: t.id } });
        status.show(`Revoked ${t.label ?? t.id}`);
      }),
  });

  const live = liveIndicator();

  const label = field("create-token", "label", "Label (optional)", h("input", { type: "text", maxlength: 128, autocomplete: "off", "data-testid": "token-label" }));
  const lifetime = field("create-token", "expiresInMs", "Expires", h("select", { "data-testid": "token-expires" }, ...LIFETIMES.map(([text, ms], i) => h("option", { value: ms === undefined ? "" : String(ms), selected: i === 0 }, text))));
  const submit: HTMLButtonElement = h("button", { type: "submit", "data-testid": "token-submit" }, "Create token");
  const formAlert = alertBox("token-alert");
  const form = h(
    "form",
    {
      class: "inline-form",
      "aria-label": "Create a token",
      "data-testid": "create-token-form",
      onsubmit: (ev) => {
        ev.preventDefault();
        const body: CreateTokenBody = {
          ...(label.control.value.trim() ? { label: label.control.value.trim() } : {}),
          ...(lifetime.control.value ? { expiresInMs: Number(lifetime.control.value) } : {}),
        };
        void busy([submit], formAlert, async () => {
          const created = await call(HttpApi.createToken, { body });
          label.control.value = "";
          replace(reveal, revealed(created, () => (replace(reveal), submit.focus())));
          reveal.querySelector("input")?.focus();
        });
      },
    },
    h("h2", {}, "New token"),
    h("div", { class: "fields" }, label.el, lifetime.el),
    h("div", { class: "form-actions" }, submit),
    formAlert.el,
  );

  root.append(pageHeader("Tokens", live.el, h("span", { class: "hint" }, "your own tokens; values are never listed")), alert.el, status.el, reveal, list.el, form);
  void followRecords(tokensFeed, (records) => list.update([...records.values()]), {
    signal: ctl.signal,
    onState: (state, error) => {
      live.set(state, error);
      if (error && state === "stopped") alert.show(error);
    },
  });
  return () => {
    ctl.abort();
    replace(reveal);
  };
};
