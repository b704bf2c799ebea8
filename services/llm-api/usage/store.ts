import type { Knex } from 'knex';
import type { UsageRecord } from './recorder.js';

/**
 * Writes a batch of usage records in ONE statement with ONE bound parameter: the batch as JSON,
 * expanded by `jsonb_to_recordset`. Binding 25 values per row through the driver cost more CPU
 * than the completions themselves at high request rates.
 */
const COLUMNS: Array<[keyof UsageRecord, string]> = [
  ['request_id', 'text'],
  ['user_id', 'text'],
  ['auth_method', 'text'],
  ['api_key_id', 'text'],
  ['model', 'text'],
  ['provider_id', 'text'],
  ['provider_model_id', 'text'],
  ['endpoint', 'text'],
  ['stream', 'boolean'],
  ['prompt_tokens', 'integer'],
  ['completion_tokens', 'integer'],
  ['reasoning_tokens', 'integer'],
  ['total_tokens', 'integer'],
  ['cost_micro_usd', 'bigint'],
  ['latency_ms', 'integer'],
  ['ttfb_ms', 'integer'],
  ['attempts', 'integer'],
  ['status', 'integer'],
  ['outcome', 'text'],
  ['metadata', 'jsonb'],
  ['created_at', 'timestamptz'],
];

const names = COLUMNS.map(([c]) => c).join(', ');
const types = COLUMNS.map(([c, t]) => `${c} ${t}`).join(', ');
const SQL = `insert into llm_usage (${names}) select ${names} from jsonb_to_recordset(?::jsonb) as x(${types})`;

export async function insertUsageBatch(knex: Knex, batch: UsageRecord[]): Promise<void> {
  await knex.raw(SQL, [JSON.stringify(batch)]);
}
