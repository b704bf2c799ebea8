import test from 'ava';
import { startPrivateRabbitMQ, type PrivateRabbitMQ } from '../helpers/private-servers.js';
import { burstScenario } from '../helpers/rabbitmq-outage.js';
import { reliabilityFigures } from '../helpers/reliability-figures.js';

// A real RabbitMQ node (the test's own, never the shared broker) is stopped and started again on
// the same port half-way through a burst of writes with a webhook subscriber; the scenario is
// described in test/helpers/rabbitmq-outage.ts. Durable queues and persistent messages survive
// the restart; what the node had not confirmed, the outbox relay publishes again. The node boots
// once before the test (5-15 s), so the test's own time is the burst and one restart.
const figures = reliabilityFigures('rabbitmq-restart');
let node: PrivateRabbitMQ;

test.before(async () => {
  node = await startPrivateRabbitMQ();
});
test.after.always(async () => {
  figures.write();
  await node?.dispose();
});

test('RabbitMQ restarted during a burst: writes keep succeeding, no event lost, no consumer stuck, deliveries resume by themselves', async (t) => {
  await burstScenario(t, figures.row('RabbitMQ node restarted during a burst'), { url: node.url, fail: () => node.stop('SIGTERM'), restore: () => node.start(), close: async () => {} }, 'rabbit-restart');
});
