import type { z } from "zod";
import type { HeldSession as HeldSessionSchema } from "@paddock/contracts";

/** A session this runner holds, as the contract's HeldSession schema describes it. */
export type HeldSession = z.infer<typeof HeldSessionSchema>;
