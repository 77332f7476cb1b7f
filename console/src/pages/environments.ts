import { h, replace } from "../dom.ts";
import type { Page } from "../router.ts";

/** Scaffold: replaced by the page itself. */
export const environmentsPage: Page = (root) => {
  replace(root, h("h1", {}, "environments"));
};
