import { runService } from "@paddock/service";
import { runnerAgentService } from "./service.ts";

runService(runnerAgentService, process.env);
