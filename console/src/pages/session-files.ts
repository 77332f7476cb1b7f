/**
 * The session page's workspace panels: a file browser (one directory at a
 * time, GET …/files/list?depth=1; download through a fetch with the bearer
 * header, never a URL with a token; upload as the raw body of PUT …/files)
 * and the diff of its repositories (GET …/diff, shown as text).
 */
import { HttpApi, type FileEntry } from "@paddock/contracts";
import { call, send } from "../api.ts";
import { ago, h, replace } from "../dom.ts";
import { alertBox, statusLine } from "./ui.ts";

function baseName(path: string): string {
  return path.slice(path.lastIndexOf("/") + 1);
}

function parentOf(path: string): string {
  const at = path.lastIndexOf("/");
  return at < 0 ? "" : path.slice(0, at);
}

function size(n: number): string {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / 1024 / 1024).toFixed(1)} MiB`;
}

/** Saves a workspace file: its bytes fetched with the bearer header, handed to the browser as a Blob. */
async function download(sessionId: string, path: string): Promise<void> {
  const res = await send(HttpApi.readFile, { params: { id: sessionId }, query: { path } });
  const url = URL.createObjectURL(await res.blob());
  const a = h("a", { href: url, download: baseName(path), class: "visually-hidden" });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

export function filesPanel(sessionId: string, signal: AbortSignal): { el: HTMLElement; refresh(): void } {
  let cwd = "";
  const alert = alertBox("files-alert");
  const status = statusLine("files-status");
  const crumbs = h("nav", { class: "crumbs", "aria-label": "Directory" });
  const list = h("ul", { class: "file-list", "data-testid": "file-list", "aria-label": "Files" });
  const upload = h("input", {
    type: "file",
    id: `upload-${sessionId}`,
    multiple: true,
    "data-testid": "file-upload",
    onchange: () => void uploadFiles(),
  });
  const refreshButton = h("button", { type: "button", "data-testid": "files-refresh", onclick: () => refresh() }, "Refresh");
  const el = h(
    "div",
    { class: "files" },
    h("div", { class: "files-bar" }, crumbs, refreshButton, h("label", { for: upload.id, class: "upload" }, "Upload to this directory: ", upload)),
    list,
    status.el,
    alert.el,
  );

  const go = (path: string) => {
    cwd = path;
    refresh();
  };

  const renderCrumbs = () => {
    const parts = cwd === "" ? [] : cwd.split("/");
    const items: Array<Node | string> = [h("button", { type: "button", class: "link", onclick: () => go(""), "aria-current": cwd === "" ? "location" : undefined }, "workspace")];
    parts.forEach((part, i) => {
      const path = parts.slice(0, i + 1).join("/");
      items.push(" / ", h("button", { type: "button", class: "link", onclick: () => go(path), "aria-current": path === cwd ? "location" : undefined }, part));
    });
    replace(crumbs, ...items);
  };

  const row = (e: FileEntry): HTMLLIElement => {
    const name = baseName(e.path);
    const open =
      e.type === "dir"
        ? h("button", { type: "button", class: "link", onclick: () => go(e.path), "aria-label": `Open directory ${name}` }, `${name}/`)
        : h("span", { class: "file-name" }, e.type === "symlink" ? `${name} →` : name);
    const get =
      e.type === "file"
        ? h(
            "button",
            {
              type: "button",
              "data-testid": "file-download",
              "aria-label": `Download ${name}`,
              onclick: () => {
                alert.clear();
                download(sessionId, e.path).catch((err: unknown) => alert.show(err));
              },
            },
            "Download",
          )
        : null;
    return h("li", { "data-testid": "file-row", "data-path": e.path, "data-type": e.type }, open, h("span", { class: "file-meta" }, e.type === "dir" ? "" : size(e.size), " · ", `${ago(e.mtime)} ago`), get);
  };

  let seq = 0;
  const refresh = (): void => {
    const mine = ++seq;
    renderCrumbs();
    call(HttpApi.listFiles, { params: { id: sessionId }, query: { ...(cwd ? { path: cwd } : {}), depth: 1 }, signal })
      .then((answer) => {
        if (mine !== seq) return;
        alert.clear();
        const entries = answer.entries.filter((e) => parentOf(e.path) === cwd);
        entries.sort((a, b) => (a.type === "dir") === (b.type === "dir") ? a.path.localeCompare(b.path) : a.type === "dir" ? -1 : 1);
        const rows: Node[] = [];
        if (cwd !== "") rows.push(h("li", { class: "up" }, h("button", { type: "button", class: "link", onclick: () => go(parentOf(cwd)), "aria-label": "Up one directory" }, "../")));
        rows.push(...entries.map(row));
        if (entries.length === 0) rows.push(h("li", { class: "empty" }, "Empty directory."));
        replace(list, ...rows);
        status.show(answer.truncated ? "Only the first entries are shown." : "");
      })
      .catch((err: unknown) => {
        if (mine !== seq || signal.aborted) return;
        replace(list);
        alert.show(err);
      });
  };

  const uploadFiles = async (): Promise<void> => {
    const files = [...(upload.files ?? [])];
    if (files.length === 0) return;
    alert.clear();
    upload.disabled = true;
    try {
      for (const f of files) {
        const path = cwd === "" ? f.name : `${cwd}/${f.name}`;
        status.show(`Uploading ${f.name}…`);
        await send(HttpApi.writeFile, { params: { id: sessionId }, query: { path } }, { rawBody: f, contentType: "application/octet-stream" });
      }
      status.show(`Uploaded ${files.map((f) => f.name).join(", ")}.`);
    } catch (err) {
      status.clear();
      alert.show(err);
    } finally {
      upload.disabled = false;
      upload.value = "";
      refresh();
    }
  };

  return { el, refresh };
}

export function diffPanel(sessionId: string, signal: AbortSignal): { el: HTMLElement; refresh(): void } {
  const alert = alertBox("diff-alert");
  const out = h("div", { "data-testid": "diff", class: "diff", "aria-live": "off" });
  const el = h("div", {}, h("button", { type: "button", "data-testid": "diff-refresh", onclick: () => refresh() }, "Refresh diff"), out, alert.el);
  const refresh = (): void => {
    call(HttpApi.readDiff, { params: { id: sessionId }, signal })
      .then((d) => {
        alert.clear();
        const parts: Node[] = [];
        for (const r of d.repos) {
          parts.push(h("h3", {}, r.path === "." ? "workspace" : r.path));
          if (r.error) parts.push(h("p", { class: "hint" }, r.error));
          parts.push(h("pre", { class: "diff-text", tabindex: 0, "aria-label": `Diff of ${r.path}` }, r.diff === "" ? "(no changes)" : r.diff));
          if (r.truncated) parts.push(h("p", { class: "hint" }, "This diff was cut at the runner's bound."));
        }
        if (d.repos.length === 0) parts.push(h("p", { class: "hint" }, "No git repository in the workspace."));
        if (d.truncated) parts.push(h("p", { class: "hint" }, "Some repositories were left out."));
        replace(out, ...parts);
      })
      .catch((err: unknown) => {
        if (!signal.aborted) alert.show(err);
      });
  };
  return { el, refresh };
}
