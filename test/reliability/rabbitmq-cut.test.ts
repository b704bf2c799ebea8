import test from 'ava';
import { startFaultProxy } from '../helpers/fault-proxy.js';
import { burstScenario } from '../helpers/rabbitmq-outage.js';
import { reliabilityFigures } from '../helpers/reliability-figures.js';
import { TEST_AMQP_URL } from '../helpers/servers.js';

// The shared RabbitMQ behind a fault proxy that cuts every connection and refuses new ones, half-way
// through a burst of writes with a webhook subscriber; the scenario is described in
// test/helpers/rabbitmq-outage.ts.
const figures = reliabilityFigures('rabbitmq-cut');
test.after.always(() => figures.write());

test('RabbitMQ cut during a burst: writes keep succeeding, the outbox keeps every event, deliveries resume, none lost', async (t) => {
  const target = new URL(TEST_AMQP_URL);
  const proxy = await startFaultProxy({ host: target.hostname, port: Number(target.port || 5672) });
  const viaProxy = new URL(TEST_AMQP_URL);
  viaProxy.port = String(proxy.port);
  await burstScenario(t, figures.row('RabbitMQ connections cut during a burst'), { url: viaProxy.toString(), fail: () => proxy.cut(), restore: () => proxy.resume(), close: () => proxy.close() }, 'rabbit-cut');
});
