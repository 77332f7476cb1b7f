/** Reading whole lists through the paged contract routes. */
import { HttpApi, MAX_PAGE_LIMIT, type Environment, type Session } from "@paddock/contracts";
import { call } from "../api.ts";

/** Pages a console reads at most for one list (MAX_PAGE_LIMIT each). */
const MAX_PAGES = 10;

async function all<T>(page: (cursor: string | undefined) => Promise<{ items: T[]; nextCursor?: string | undefined }>): Promise<T[]> {
  const out: T[] = [];
  let cursor: string | undefined;
  for (let i = 0; i < MAX_PAGES; i++) {
    const p = await page(cursor);
    out.push(...p.items);
    cursor = p.nextCursor;
    if (!cursor) break;
  }
  return out;
}

export function allSessions(includeTerminal: boolean, signal?: AbortSignal): Promise<Session[]> {
  return all(async (cursor) => {
    const p = await call(HttpApi.listSessions, { query: { limit: MAX_PAGE_LIMIT, includeTerminal, cursor }, signal });
    return { items: p.sessions, nextCursor: p.nextCursor };
  });
}

export function allEnvironments(signal?: AbortSignal): Promise<Environment[]> {
  return all(async (cursor) => {
    const p = await call(HttpApi.listEnvironments, { query: { limit: MAX_PAGE_LIMIT, cursor }, signal });
    return { items: p.environments, nextCursor: p.nextCursor };
  });
}
