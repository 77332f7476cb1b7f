// A client of the sessions list in its own OS process (the bench's process
// also runs thousands of simulated runners, whose timers would be timed
// too): `node --import tsx bench/src/list-client-main.ts '<options as JSON>'`.
// Walks `pages` pages of GET /v1/sessions, each from the previous page's
// cursor (a new walk from the first page when one ends), then reads one
// record by id as often (GET /v1/sessions/:id: the same auth and rpc path,
// the baseline). Prints one JSON line of milliseconds.
import { percentile } from "./stats.ts";

interface Options {
  url: string;
  token: string;
  pages: number;
  limit: number;
}

const opts = JSON.parse(process.argv[2] ?? "{}") as Options;
const headers = { authorization: `Bearer ${opts.token}` };

async function timed(path: string): Promise<{ ms: number; body: unknown }> {
  const start = performance.now();
  const res = await fetch(`${opts.url}${path}`, { headers });
  const body: unknown = await res.json();
  if (!res.ok) throw new Error(`${path}: ${res.status} ${JSON.stringify(body)}`);
  return { ms: performance.now() - start, body };
}

const list: number[] = [];
let cursor: string | undefined;
let someId = "";
let rows = 0;
for (let i = 0; i < opts.pages; i++) {
  const { ms, body } = await timed(`/v1/sessions?limit=${opts.limit}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`);
  const page = body as { sessions: Array<{ id: string }>; nextCursor?: string };
  list.push(ms);
  rows += page.sessions.length;
  someId ||= page.sessions[0]?.id ?? "";
  cursor = page.nextCursor;
}
const get: number[] = [];
for (let i = 0; i < opts.pages; i++) get.push((await timed(`/v1/sessions/${someId}`)).ms);
// The first tenth warms the client's connection and code; not counted.
const warm = (xs: number[]) => xs.slice(Math.floor(xs.length / 10));
const [l, g] = [warm(list), warm(get)];
process.stdout.write(`${JSON.stringify({ rows, listP50: percentile(l, 50), listP99: percentile(l, 99), getP50: percentile(g, 50), getP99: percentile(g, 99) })}\n`);
