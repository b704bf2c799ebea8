// Child process of bench/events/run.ts: the whole platform in one process, as `npm start` runs it,
// on the embedded defaults (PGlite + the PostgreSQL-backed queue) or on the production drivers
// (PostgreSQL + RabbitMQ, the test servers), with the production poll intervals. Prints
// {"llm","gatewaySecret","adminId"} once ready, then serves commands on stdin, one JSON per line:
//   {"burst": n}  commits n events in one transaction (answers {"committed": n})
import { createInterface } from 'node:readline';
import type { Knex } from 'knex';
import { newId, recordEvent } from '../../services/kit/index.js';
import { startEmbeddedPlatform } from '../../test/helpers/embedded.js';
import { startTestPlatform } from '../../test/helpers/platform.js';

const mode = process.argv[2] === 'rabbitmq' ? 'rabbitmq' : 'embedded';
// The defaults of npm start, not the tests' 20 ms pollers.
const env = { LOG_LEVEL: 'silent', EGRESS_ALLOW_HOSTS: '127.0.0.1', BUS_POLL_MS: '250', OUTBOX_POLL_MS: '500' };

// Events are committed without kicking the relay, as the services do: the relay finds them on its poll.
let knex: Knex;
let llm: string;
let gatewaySecret: string;
let adminId: string;
let stop: () => Promise<void>;
if (mode === 'embedded') {
  const p = await startEmbeddedPlatform(env);
  knex = p.platform.ctx.runtime.db.knex;
  llm = `http://127.0.0.1:${p.platform.port('llm-api')}`;
  gatewaySecret = p.platform.ctx.gatewaySecret;
  adminId = p.adminId;
  stop = p.stop;
} else {
  const p = await startTestPlatform({ bus: 'amqp', env });
  knex = p.runtime.db.knex;
  llm = p.serviceUrl('llm-api');
  gatewaySecret = p.gatewaySecret;
  adminId = newId('user');
  await knex('users').insert({ id: adminId, subject: adminId, email: 'bench-admin@example.test', username: 'bench-admin', is_admin: true });
  stop = p.stop;
}

process.stdout.write(`${JSON.stringify({ llm, gatewaySecret, adminId })}\n`);
for await (const line of createInterface({ input: process.stdin })) {
  const command = JSON.parse(line) as { burst?: number };
  if (command.burst) {
    const n = command.burst;
    await knex.transaction(async (trx) => {
      for (let i = 0; i < n; i++) await recordEvent(trx, 'message.sent', { bench: true, n: i });
    });
    process.stdout.write(`${JSON.stringify({ committed: n })}\n`);
  }
}
await stop();
process.exit(0);
