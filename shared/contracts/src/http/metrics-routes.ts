import { z } from "zod";
import { Id } from "../ids.ts";
import { SessionMetrics } from "../metrics.ts";
import { httpRoute, json } from "./route.ts";

export const MetricsRoutes = {
  getSessionMetrics: httpRoute({
    method: "GET",
    path: "/v1/sessions/:id/metrics",
    summary:
      "The session's CPU, memory, workspace size and egress samples (every few seconds, the last hour of its current placement; the last one taken now), any member. A session without a live sandbox answers no samples; reading them does not wake it.",
    params: z.object({ id: Id }).strict(),
    responses: [json(SessionMetrics)],
    errors: ["not_found"],
  }),
} as const;
