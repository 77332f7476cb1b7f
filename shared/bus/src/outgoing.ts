import type { NatsConnection } from "@nats-io/transport-node";
import { encodeJson, encodeUnchecked, type Encoder } from "./codec.ts";

/**
 * Whether a connection checks its outgoing messages against their schemas:
 * an option of the bus, given to connectBus (`validateOutgoing`). Every
 * receiver validates what it reads at the bus boundary, so the sender's check
 * only catches its own bug sooner; it was 14% of the scheduler's CPU under load
 * (`pnpm bench`, benchmark 1, docs/decisions/0018). A service's bus takes it from
 * its config (`PADDOCK_VALIDATE_OUTGOING`, off by default; on in the test stacks).
 */
const encoders = new WeakMap<NatsConnection, Encoder>();

/** Records a connection's outgoing validation (connectBus does, as it connects). */
export function setBusEncoder(nc: NatsConnection, validateOutgoing: boolean): void {
  encoders.set(nc, validateOutgoing ? encodeJson : encodeUnchecked);
}

/**
 * The encoder of messages sent on nc: checked against their schema when its bus
 * validates outgoing messages. A connection not made by connectBus (a test's
 * own) validates.
 */
export function encoderOf(nc: NatsConnection): Encoder {
  return encoders.get(nc) ?? encodeJson;
}
