// The last step of `npm test` (scripts/test.mjs): deletes the queues of every prefix the run's
// cleanups recorded in the ledger named on the command line (`deleteAmqpTopology`), with one
// `rabbitmqctl` listing for the whole run.
import { sweepRecordedQueues } from './amqp.js';

const { prefixes, queues } = await sweepRecordedQueues(process.argv[2]!);
console.log(`RabbitMQ cleanup: ${queues} queues of ${prefixes} test runtimes deleted`);
