/**
 * Small pieces every list page shares: the alert that shows an API error as
 * the API said it, a status line, buttons that are disabled while their call
 * runs, a two-step (confirm) button, and the live-follow indicator.
 */
import { ApiError } from "../api.ts";
import { h, replace } from "../dom.ts";
import type { FollowState } from "../live.ts";

export interface Alert {
  readonly el: HTMLElement;
  show(err: unknown): void;
  clear(): void;
}

/** The text an error is shown as: the API's own message, with its code and status. */
export function errorText(err: unknown): string {
  if (err instanceof ApiError) return `${err.message} (${err.code}${err.status ? `, ${err.status}` : ""})`;
  if (err instanceof Error) return err.message;
  return String(err);
}

/** An element with role="alert" (announced when it gets text); empty and hidden until an error. */
export function alertBox(testid = "alert"): Alert {
  const el = h("div", { role: "alert", class: "alert", "data-testid": testid, hidden: true });
  return {
    el,
    show(err) {
      replace(el, errorText(err));
      el.hidden = false;
    },
    clear() {
      replace(el);
      el.hidden = true;
    },
  };
}

/** A polite status line (successes, "snapshot taken", the new session's link). */
export function statusLine(testid = "status"): { el: HTMLElement; show(...content: Array<Node | string>): void; clear(): void } {
  const el = h("p", { role: "status", class: "status", "data-testid": testid });
  return { el, show: (...content) => replace(el, ...content), clear: () => replace(el) };
}

/** Runs `fn` with `buttons` disabled (and aria-busy) until it settles; an error goes to `alert`. */
export async function busy<T>(buttons: readonly HTMLButtonElement[], alert: Alert, fn: () => Promise<T>): Promise<T | undefined> {
  for (const b of buttons) {
    b.disabled = true;
    b.setAttribute("aria-busy", "true");
  }
  alert.clear();
  try {
    return await fn();
  } catch (err) {
    alert.show(err);
    return undefined;
  } finally {
    for (const b of buttons) {
      b.disabled = false;
      b.removeAttribute("aria-busy");
    }
  }
}

/** A button that runs an API call, disabled while it runs. */
export function actionButton(label: string, attrs: { testid: string; ariaLabel?: string; danger?: boolean }, alert: Alert, fn: () => Promise<unknown>): HTMLButtonElement {
  const b: HTMLButtonElement = h("button", {
    type: "button",
    class: attrs.danger ? "danger" : undefined,
    "data-testid": attrs.testid,
    "aria-label": attrs.ariaLabel,
    onclick: () => void busy([b], alert, fn),
  });
  b.textContent = label;
  return b;
}

/**
 * A destructive action in two steps: the button asks, then "Confirm" runs it
 * (or "Cancel" puts the button back). Focus moves to the confirm button, and
 * back to the first one on cancel.
 */
export function confirmButton(label: string, attrs: { testid: string; ariaLabel: string; question: string }, alert: Alert, fn: () => Promise<unknown>): HTMLElement {
  const slot = h("span", { class: "confirm" });
  const first: HTMLButtonElement = h("button", { type: "button", class: "danger", "data-testid": attrs.testid, "aria-label": attrs.ariaLabel, onclick: () => ask() }, label);
  const ask = () => {
    const yes: HTMLButtonElement = h(
      "button",
      { type: "button", class: "danger", "data-testid": "confirm", "aria-label": `Confirm: ${attrs.ariaLabel}`, onclick: () => void busy([yes, no], alert, fn).then(() => slot.isConnected && back(false)) },
      "Confirm",
    );
    const no: HTMLButtonElement = h("button", { type: "button", "data-testid": "cancel", onclick: () => back(true) }, "Cancel");
    replace(slot, h("span", { class: "question" }, attrs.question), " ", yes, " ", no);
    yes.focus();
  };
  const back = (focus: boolean) => {
    replace(slot, first);
    if (focus) first.focus();
  };
  replace(slot, first);
  return slot;
}

/** Shows the state of a page's live follow ("live", "reconnecting…"), announced politely. */
export function liveIndicator(): { el: HTMLElement; set(state: FollowState, error?: ApiError): void } {
  const el = h("span", { class: "live", "data-testid": "live", "data-state": "connecting", role: "status" }, "connecting…");
  const text: Record<FollowState, string> = { connecting: "connecting…", live: "live", retrying: "reconnecting…", stopped: "not live" };
  return {
    el,
    set(state, error) {
      el.setAttribute("data-state", state);
      replace(el, error && state === "stopped" ? `not live: ${error.message}` : text[state]);
    },
  };
}

/** The page heading with its live indicator beside it. */
export function pageHeader(title: string, live: HTMLElement, ...extra: Array<Node | string>): HTMLElement {
  return h("header", { class: "page-head" }, h("h1", {}, title), live, ...extra);
}
