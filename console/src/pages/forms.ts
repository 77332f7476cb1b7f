/**
 * Form pieces: a labelled field with its own error line, and the API's
 * `invalid` messages put next to the field they name.
 *
 * The gateway words a refused body as `body: <path>: <message>; <path>: …`
 * (describeZodError), so the first segment of each path names a field.
 */
import { ApiError } from "../api.ts";
import { h, replace } from "../dom.ts";
import type { Alert } from "./ui.ts";

export interface InvalidParts {
  /** Messages by the top-level field they name. */
  readonly fields: Readonly<Record<string, string>>;
  /** Messages that name no field (or one the form does not show). */
  readonly rest: readonly string[];
}

/** Splits an `invalid` message into per-field messages, for the fields a form knows. */
export function parseInvalid(message: string, known: readonly string[]): InvalidParts {
  const fields: Record<string, string> = {};
  const rest: string[] = [];
  const body = message.replace(/^body:\s*/, "");
  for (const part of body.split(/;\s+/)) {
    const m = /^([A-Za-z_][\w]*)((?:\.[\w]+)*):\s*(.+)$/.exec(part.trim());
    const field = m?.[1];
    if (m && field !== undefined && known.includes(field)) {
      const sub = m[2] ? `${m[2].slice(1)}: ` : "";
      const text = `${sub}${m[3] ?? ""}`;
      fields[field] = fields[field] ? `${fields[field]}; ${text}` : text;
    } else if (part.trim() !== "") rest.push(part.trim());
  }
  return { fields, rest };
}

/**
 * A command line as argv: words split on blanks, quotes ('…' or "…") group,
 * a backslash escapes the next character. No expansion of any kind.
 */
export function splitCommand(line: string): string[] {
  const out: string[] = [];
  let word = "";
  let inWord = false;
  let quote: '"' | "'" | undefined;
  for (let i = 0; i < line.length; i++) {
    const c = line.charAt(i);
    if (quote) {
      if (c === quote) quote = undefined;
      else if (c === "\\" && quote === '"' && i + 1 < line.length) word += line.charAt(++i);
      else word += c;
    } else if (c === "'" || c === '"') {
      quote = c;
      inWord = true;
    } else if (c === "\\" && i + 1 < line.length) {
      word += line.charAt(++i);
      inWord = true;
    } else if (/\s/.test(c)) {
      if (inWord) out.push(word);
      word = "";
      inWord = false;
    } else {
      word += c;
      inWord = true;
    }
  }
  if (quote) throw new Error("the command has an unclosed quote");
  if (inWord) out.push(word);
  return out;
}

/** Lines (or commas) as a list, blanks dropped. */
export function listOf(text: string): string[] {
  return text
    .split(/[\n,]/)
    .map((s) => s.trim())
    .filter((s) => s !== "");
}

export interface Field<E extends HTMLElement = HTMLElement> {
  readonly name: string;
  readonly control: E;
  readonly el: HTMLElement;
  setError(message: string | undefined): void;
}

/** A label, its control, an optional hint and an error line, tied together by ids. */
export function field<E extends HTMLInputElement | HTMLSelectElement | HTMLTextAreaElement>(formId: string, name: string, label: string, control: E, hint?: string): Field<E> {
  const id = `${formId}-${name}`;
  const errId = `${id}-error`;
  const hintId = `${id}-hint`;
  control.id = id;
  control.name = name;
  control.setAttribute("aria-describedby", hint ? `${hintId} ${errId}` : errId);
  const err = h("p", { id: errId, class: "field-error", "data-testid": `error-${name}`, hidden: true });
  const el = h("div", { class: "field" }, h("label", { for: id }, label), control, hint ? h("p", { id: hintId, class: "hint" }, hint) : null, err);
  return {
    name,
    control,
    el,
    setError(message) {
      replace(err, message ?? "");
      err.hidden = message === undefined;
      if (message === undefined) control.removeAttribute("aria-invalid");
      else control.setAttribute("aria-invalid", "true");
    },
  };
}

/**
 * Shows a failed submit: an `invalid` error's field messages next to their
 * fields (focus on the first), everything else in the alert.
 */
export function showFormError(err: unknown, fields: readonly Field[], alert: Alert): void {
  for (const f of fields) f.setError(undefined);
  if (!(err instanceof ApiError) || err.code !== "invalid") return alert.show(err);
  const { fields: byField, rest } = parseInvalid(err.message, fields.map((f) => f.name));
  let first: Field | undefined;
  for (const f of fields) {
    const msg = byField[f.name];
    if (msg === undefined) continue;
    f.setError(msg);
    first ??= f;
  }
  if (!first) alert.show(err);
  else alert.show(new ApiError(err.status, err.code, rest.length > 0 ? rest.join("; ") : "the API refused some fields: see the messages next to them"));
  first?.control.focus();
}

export function clearFormErrors(fields: readonly Field[]): void {
  for (const f of fields) f.setError(undefined);
}
