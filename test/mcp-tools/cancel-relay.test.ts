import amqp from 'amqplib';
import test from 'ava';
import { Registry } from 'prom-client';
import { BusUnavailableError, createAmqpBus } from '../../services/kit/bus/amqp.js';
import { createLogger, ManualClock, type Bus } from '../../services/kit/index.js';
import { createToolCaller, HELD_CANCEL_ALLOWANCE_MS } from '../../services/mcp-tools/tools/call-tool.js';
import { createCancelRelay, MAX_HELD, RETRY_FIRST_MS, RETRY_MAX_MS, type ArmTimer, type CancelRelay } from '../../services/mcp-tools/tools/cancel-relay.js';
import { createCatalog } from '../../services/mcp-tools/tools/catalog.js';
import { createToolMetrics } from '../../services/mcp-tools/tools/metrics.js';
import { deleteAmqpTopology, queueConsumers, queuesStartingWith } from '../helpers/amqp.js';
import { TEST_AMQP_URL, uniqueName } from '../helpers/env.js';
import { startFaultProxyFor, type UrlFaultProxy } from '../helpers/fault-proxy.js';
import { waitFor } from '../helpers/wait.js';
import { untilCancelledTool } from '../mcp/until-cancelled-tool.js';

// The cancel relay while the publishing replica's connection to RabbitMQ is down (a TCP fault proxy
// cuts it): what it cannot publish is kept, in order, and published once the bus reconnects; what
// is older than the bound by then is dropped, and at most MAX_HELD are kept. A publish refused with
// the connection up is retried on a timer (the test's own, fired by hand). What a cancel carries is
// how long it was kept, so replicas' clocks (manual ones here, 10 s apart) are never compared. Real
// RabbitMQ; the clocks are manual, so ageing needs no waiting. A relay that stops deletes its own
// queue at once; one cut off keeps it for the grace.
const name = uniqueName('cancelrelay');
const exchange = `${name}.events`;
const prefix = `${name}.`;
const logger = createLogger({ level: 'silent', name: 'cancel-relay-test' });
const MAX_AGE_MS = 65_000;
const buses: Bus[] = [];
const relays: CancelRelay[] = [];
let proxy: UrlFaultProxy;

test.before(async () => {
  proxy = await startFaultProxyFor(TEST_AMQP_URL, 5672);
});
test.after.always(async () => {
  proxy?.resume();
  for (const relay of relays) await relay.stop().catch(() => {});
  for (const bus of buses) await bus.close().catch(() => {});
  await proxy?.close();
  await deleteAmqpTopology(prefix, exchange);
});

async function bus(url: string): Promise<Bus> {
  const opened = await createAmqpBus({ url, exchange, queuePrefix: prefix, logger, minBackoffMs: 20, maxBackoffMs: 200 });
  buses.push(opened);
  return opened;
}

/** A publishing replica behind the proxy, and a receiving one connected directly that records what it is handed. */
async function replicas() {
  const clock = new ManualClock();
  const publisherBus = await bus(proxy.proxiedUrl);
  const publisher = createCancelRelay({ bus: publisherBus, logger, clock, maxAgeMs: MAX_AGE_MS })!;
  const receiver = createCancelRelay({ bus: await bus(TEST_AMQP_URL), logger, clock: new ManualClock(), maxAgeMs: MAX_AGE_MS })!;
  relays.push(publisher, receiver);
  const received: Array<{ userId: string; requestId: string | number; heldMs: number | undefined }> = [];
  await receiver.listen((userId, requestId, _reason, heldMs) => {
    received.push({ userId, requestId, heldMs });
    return false;
  });
  let reconnected!: () => void;
  const back = new Promise<void>((resolve) => (reconnected = resolve));
  publisherBus.onReconnect(() => reconnected());
  return { clock, publisherBus, publisher, received, back };
}

async function cut(bus: Bus): Promise<void> {
  proxy.cut();
  await waitFor(async () => bus.ping().then(() => false, () => true), 10_000, 'the bus to notice the broker is gone');
}

test.serial('a cancel published while the broker is away is kept and published after the reconnect; one older than the bound by then is dropped', async (t) => {
  const { clock, publisherBus, publisher, received, back } = await replicas();
  await cut(publisherBus);
  publisher.publish('usr_a', 1, 'too old by the time the broker is back');
  clock.advance(MAX_AGE_MS - 1000);
  publisher.publish('usr_a', 2, undefined);
  t.is(publisher.held(), 2);
  // The first is now older than the bound, the second kept 2 s.
  clock.advance(2000);

  proxy.resume();
  await back;
  // Received there and confirmed here: the two arrive in either order.
  await waitFor(() => received.length > 0 && publisher.held() === 0, 10_000, 'the kept cancel to reach the other replica');
  // Sent oldest first on one channel: had the expired one gone out, it would have arrived before this one.
  t.deepEqual(received, [{ userId: 'usr_a', requestId: 2, heldMs: 2000 }]);

  // With the bus up, a cancel goes out at once, after nothing.
  publisher.publish('usr_a', 3, undefined);
  await waitFor(() => received.length > 1, 10_000, 'the next cancel');
  t.deepEqual(received.map((r) => [r.requestId, r.heldMs]), [[2, 2000], [3, 0]]);
});

/** A replica's calls, each running until cancelled, started by its own clock. */
function callsOn(clock: ManualClock) {
  const tool = untilCancelledTool();
  const caller = createToolCaller({ catalog: createCatalog([tool]), switches: { isEnabled: () => true }, metrics: createToolMetrics(new Registry()), logger, maxConcurrentCalls: 8, clock });
  const start = (userId: string, requestId: number) => {
    const state: { settled: boolean; text?: string } = { settled: false };
    const done = caller({ userId, requestId, signal: new AbortController().signal }, 'wait', {}).then((result) => {
      state.settled = true;
      state.text = (result.content[0] as { text: string }).text;
    });
    return { state, done };
  };
  return { caller, start };
}

test.serial("with the receiving replica's clock 10 s ahead, a cancel relayed at once stops the call; a kept one stops the call it named but not the same user's newer call reusing its id", async (t) => {
  const senderClock = new ManualClock(1_800_000_000_000);
  const receiverClock = new ManualClock(senderClock.now() + 10_000);
  const publisherBus = await bus(proxy.proxiedUrl);
  const publisher = createCancelRelay({ bus: publisherBus, logger, clock: senderClock, maxAgeMs: MAX_AGE_MS })!;
  const receiver = createCancelRelay({ bus: await bus(TEST_AMQP_URL), logger, clock: receiverClock, maxAgeMs: MAX_AGE_MS })!;
  relays.push(publisher, receiver);
  const { caller, start } = callsOn(receiverClock);
  const handed: Array<{ requestId: string | number; heldMs: number | undefined; stopped: boolean }> = [];
  await receiver.listen((userId, requestId, reason, heldMs) => {
    if (userId !== 'usr_c') return false;
    const stopped = caller.cancelHere(userId, requestId, reason, heldMs);
    handed.push({ requestId, heldMs, stopped });
    return stopped;
  });

  // The user presses stop at once: the broker is fine, the cancel goes out unkept.
  const prompt = start('usr_c', 1);
  publisher.publish('usr_c', 1, undefined);
  await waitFor(() => handed.length === 1, 10_000, 'the cancel to reach the other replica');
  t.deepEqual(handed, [{ requestId: 1, heldMs: 0, stopped: true }]);
  await prompt.done;
  t.is(prompt.state.text, 'The call was cancelled');
  // The broker may deliver the cancel before it confirms it to the publisher: until the confirm
  // arrives the cancel is still kept, and a cut now would keep it for the reconnect too.
  await waitFor(() => publisher.held() === 0, 10_000, 'the broker to confirm the first cancel');

  let reconnected!: () => void;
  const back = new Promise<void>((resolve) => (reconnected = resolve));
  const remove = publisherBus.onReconnect(() => reconnected());
  t.teardown(remove);
  await cut(publisherBus);
  t.teardown(() => proxy.resume());
  // Call 2 runs on the receiving replica when its cancel is kept; call 3's cancel names a call that
  // ends meanwhile, and 30 s later the user's next call reuses id 3.
  const named = start('usr_c', 2);
  publisher.publish('usr_c', 2, undefined);
  publisher.publish('usr_c', 3, undefined);
  t.is(publisher.held(), 2);
  senderClock.advance(30_000);
  receiverClock.advance(30_000);
  const newer = start('usr_c', 3);
  proxy.resume();
  await back;
  await waitFor(() => handed.length === 3, 10_000, 'the kept cancels to reach the other replica');
  t.deepEqual(handed.slice(1), [
    { requestId: 2, heldMs: 30_000, stopped: true },
    { requestId: 3, heldMs: 30_000, stopped: false },
  ]);
  await named.done;
  t.is(named.state.text, 'The call was cancelled');
  t.false(newer.state.settled, 'the newer call under the reused id goes on');
  t.true(caller.cancel('usr_c', 3));
  await newer.done;
});

test.serial("a cancel relayed promptly to a replica where the call's POST is still being read is kept there: the call is answered cancelled and starts nothing", async (t) => {
  // Replica A gets the client's cancel; replica B has the call's POST, its body not read yet (admitted, no call running).
  const replica = (cancelElsewhere?: CancelRelay['publish']) => {
    let started = 0;
    const caller = createToolCaller({ catalog: createCatalog([untilCancelledTool(() => started++)]), switches: { isEnabled: () => true }, metrics: createToolMetrics(new Registry()), logger, maxConcurrentCalls: 8, clock: new ManualClock(), cancelElsewhere });
    return { caller, started: () => started };
  };
  const relayA = createCancelRelay({ bus: await bus(TEST_AMQP_URL), logger, clock: new ManualClock(), maxAgeMs: MAX_AGE_MS })!;
  const relayB = createCancelRelay({ bus: await bus(TEST_AMQP_URL), logger, clock: new ManualClock(), maxAgeMs: MAX_AGE_MS })!;
  relays.push(relayA, relayB);
  const { caller: callerA } = replica(relayA.publish);
  const { caller: callerB, started } = replica();
  const handed: Array<string | number> = [];
  await relayB.listen((userId, requestId, reason, heldMs) => {
    if (userId !== 'usr_e') return false;
    const stopped = callerB.cancelHere(userId, requestId, reason, heldMs);
    handed.push(requestId);
    return stopped;
  });

  const callPost = callerB.admit('usr_e');
  const cancelPost = callerA.admit('usr_e');
  t.false(callerA.cancel('usr_e', 11, 'user pressed stop'), 'no call under that id runs on A');
  callerA.release('usr_e', cancelPost);
  await waitFor(() => handed.includes(11), 10_000, 'the cancel to reach replica B');

  const pending = callerB({ userId: 'usr_e', requestId: 11, signal: new AbortController().signal, admission: callPost }, 'wait', {});
  const ranAnyway = started() > 0;
  if (ranAnyway) callerB.cancel('usr_e', 11); // without the kept cancel the call would run until cancelled
  const result = await pending;
  t.false(ranAnyway, 'the tool never ran on B');
  t.true(result.isError);
  t.is((result.content[0] as { text: string }).text, 'The call was cancelled');
  callerB.release('usr_e', callPost);
});

test("a relayed cancel the other replica kept past the allowance (its broker away) is not kept for this replica's open POSTs: it may name a call long over", async (t) => {
  let started = 0;
  const caller = createToolCaller({ catalog: createCatalog([untilCancelledTool(() => started++)]), switches: { isEnabled: () => true }, metrics: createToolMetrics(new Registry()), logger, maxConcurrentCalls: 8, clock: new ManualClock() });
  const post = caller.admit('usr_f');
  t.false(caller.cancelHere('usr_f', 12, undefined, HELD_CANCEL_ALLOWANCE_MS + 1));
  const running = caller({ userId: 'usr_f', requestId: 12, signal: new AbortController().signal, admission: post }, 'wait', {});
  t.is(started, 1, 'the call of the open POST runs');
  t.true(caller.cancel('usr_f', 12));
  await running;
  // Promptly relayed (or from a replica sending no age): kept.
  t.false(caller.cancelHere('usr_f', 13, undefined, HELD_CANCEL_ALLOWANCE_MS));
  t.false(caller.cancelHere('usr_f', 14, undefined, undefined));
  for (const requestId of [13, 14]) {
    const pending = caller({ userId: 'usr_f', requestId, signal: new AbortController().signal, admission: post }, 'wait', {});
    if (started > 1) caller.cancel('usr_f', requestId); // not kept: it would run until cancelled
    t.is((await pending).content[0]!.type, 'text');
  }
  t.is(started, 1, 'the calls named by prompt cancels never ran');
  caller.release('usr_f', post);
});

/** Timers the test fires by hand: each armed one is recorded with its delay. */
function handTimers() {
  const armed: Array<{ run: () => void; delayMs: number; cleared: boolean }> = [];
  let onArm: (() => void) | undefined;
  const arm: ArmTimer = (run, delayMs) => {
    const timer = { run, delayMs, cleared: false };
    armed.push(timer);
    onArm?.();
    return () => (timer.cleared = true);
  };
  /** The next timer armed from now on. */
  const next = () => {
    const count = armed.length;
    return new Promise<(typeof armed)[number]>((resolve) => {
      onArm = () => {
        if (armed.length > count) resolve(armed[count]!);
      };
    });
  };
  return { arm, armed, next };
}

test.serial('kept cancels are retried on a backing-off timer when a publish fails with the connection up (no reconnect comes); sending them clears it, and so does stop', async (t) => {
  const realBus = await bus(TEST_AMQP_URL);
  let refusing = true;
  // The broker refusing publishes while the connection stays up (a confirm that never comes under a memory alarm).
  const refusingBus = new Proxy(realBus, {
    get(target, property) {
      if (property === 'publish') {
        return (...args: Parameters<Bus['publish']>) => (refusing ? Promise.reject(new BusUnavailableError('publish was not confirmed within 10000 ms')) : target.publish(...args));
      }
      const value = Reflect.get(target, property);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
  let reconnects = 0;
  t.teardown(realBus.onReconnect(() => reconnects++));
  const timers = handTimers();
  const publisher = createCancelRelay({ bus: refusingBus, logger, clock: new ManualClock(), maxAgeMs: MAX_AGE_MS, armTimer: timers.arm })!;
  const receiver = createCancelRelay({ bus: await bus(TEST_AMQP_URL), logger, clock: new ManualClock(), maxAgeMs: MAX_AGE_MS })!;
  relays.push(publisher, receiver);
  const received: Array<string | number> = [];
  await receiver.listen((userId, requestId) => {
    if (userId === 'usr_r') received.push(requestId);
    return false;
  });

  let armed = timers.next();
  publisher.publish('usr_r', 1, undefined);
  const delays: number[] = [];
  for (let attempt = 0; attempt < 6; attempt++) {
    const timer = await armed;
    delays.push(timer.delayMs);
    t.is(publisher.held(), 1);
    armed = timers.next();
    timer.run();
  }
  t.deepEqual(delays, [RETRY_FIRST_MS, 2000, 4000, 8000, RETRY_MAX_MS, RETRY_MAX_MS]);
  const last = await armed;
  t.is(timers.armed.length, 7, 'each failed attempt armed one timer');

  // The broker takes publishes again; no reconnect announces it: the retry sends the kept cancel.
  refusing = false;
  last.run();
  // Received here, and confirmed to the publisher: the two arrive in either order.
  await waitFor(() => received.length === 1 && publisher.held() === 0, 10_000, 'the retried cancel to reach the other replica');
  t.is(reconnects, 0);
  t.is(timers.armed.length, 7, 'nothing left to retry');

  // Failing again starts from the first delay; a cancel that goes out meanwhile takes the kept one along and clears the retry.
  refusing = true;
  armed = timers.next();
  publisher.publish('usr_r', 2, undefined);
  const again = await armed;
  t.is(again.delayMs, RETRY_FIRST_MS);
  refusing = false;
  publisher.publish('usr_r', 3, undefined);
  await waitFor(() => received.length === 3 && again.cleared, 10_000, 'both cancels sent and the retry cleared');
  t.deepEqual(received, [1, 2, 3]);

  // A relay that stops clears its retry.
  refusing = true;
  armed = timers.next();
  publisher.publish('usr_r', 4, undefined);
  const pending = await armed;
  t.false(pending.cleared);
  await publisher.stop();
  t.true(pending.cleared);
});

test.serial('at most MAX_HELD cancels are kept while the broker is away: the oldest give way', async (t) => {
  const { publisherBus, publisher, received, back } = await replicas();
  await cut(publisherBus);
  for (let n = 1; n <= MAX_HELD + 2; n++) publisher.publish('usr_b', n, undefined);
  t.is(publisher.held(), MAX_HELD);
  proxy.resume();
  await back;
  await waitFor(() => received.length >= MAX_HELD, 20_000, 'the kept cancels to reach the other replica');
  t.is(received.length, MAX_HELD);
  t.is(received[0]!.requestId, 3);
  t.is(received.at(-1)!.requestId, MAX_HELD + 2);
});

test.serial('a stopped relay deletes its queue of cancels at once; one cut off from the broker keeps it for the grace', async (t) => {
  const queuePrefix = `${prefix}mcp-tools.call-cancels.`;
  const before = new Set(await queuesStartingWith([queuePrefix]));
  const listening = async (url: string) => {
    const relay = createCancelRelay({ bus: await bus(url), logger, clock: new ManualClock(), maxAgeMs: MAX_AGE_MS })!;
    relays.push(relay);
    await relay.listen(() => false);
    const added = (await queuesStartingWith([queuePrefix])).filter((q) => !before.has(q));
    for (const q of added) before.add(q);
    t.is(added.length, 1, 'each listening relay has a queue of its own');
    return { relay, queue: added[0]! };
  };
  const stopping = await listening(TEST_AMQP_URL);
  const cutOff = await listening(proxy.proxiedUrl);

  await stopping.relay.stop();
  const admin = await amqp.connect(TEST_AMQP_URL);
  t.teardown(() => admin.close().catch(() => {}));
  proxy.cut();
  t.teardown(() => proxy.resume());
  await waitFor(async () => (await queueConsumers(admin, cutOff.queue)) === 0, 10_000, 'the broker to drop the cut-off consumer');
  const left = await queuesStartingWith([queuePrefix]);
  t.false(left.includes(stopping.queue), 'the stopped relay left no queue behind');
  t.true(left.includes(cutOff.queue), 'the cut-off relay keeps its queue for the grace');
});
