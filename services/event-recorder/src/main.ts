import { runService } from "@paddock/service";
import { eventRecorderService } from "./service.ts";

runService(eventRecorderService, process.env);
