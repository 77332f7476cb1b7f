import { runService } from "@paddock/service";
import { schedulerService } from "./service.ts";

runService(schedulerService, process.env);
