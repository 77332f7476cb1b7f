import type { z } from "zod";

/**
 * One request/reply operation on the bus: its subject and both schemas. A
 * leaf of its own, so that the modules defining rpcs (api, fleet-rpc,
 * workspace) can import each other's schemas without a cycle.
 */
export interface Rpc<Req extends z.ZodType, Res extends z.ZodType> {
  readonly subject: string;
  readonly request: Req;
  readonly result: Res;
}
