import { runService } from "@paddock/service";
import { gatewayService } from "./service.ts";

runService(gatewayService, process.env);
