import type { Knex } from 'knex';
import { columnArrays, type ArrayColumn, type ColumnType } from '../../kit/index.js';
import type { UsageRecord } from './recorder.js';

/**
 * Writes a batch of usage records in ONE statement with one bound value per column (kit
 * `columnArrays`): binding 25 values per row through the driver cost more CPU than the completions
 * themselves at high request rates, and the rows as one JSON document cost the database more to
 * expand than arrays do.
 */
const field = (name: keyof UsageRecord, type: ColumnType): ArrayColumn<UsageRecord> => [name, type, (row) => row[name]];
const USAGE_ROWS = columnArrays<UsageRecord>([
  field('request_id', 'text'),
  field('user_id', 'text'),
  field('auth_method', 'text'),
  field('api_key_id', 'text'),
  field('model', 'text'),
  field('provider_id', 'text'),
  field('provider_model_id', 'text'),
  field('endpoint', 'text'),
  field('stream', 'boolean'),
  field('prompt_tokens', 'integer'),
  field('completion_tokens', 'integer'),
  field('reasoning_tokens', 'integer'),
  field('total_tokens', 'integer'),
  field('cost_micro_usd', 'bigint'),
  field('latency_ms', 'integer'),
  field('ttfb_ms', 'integer'),
  field('attempts', 'integer'),
  field('status', 'integer'),
  field('outcome', 'text'),
  field('metadata', 'jsonb'),
  field('created_at', 'timestamptz'),
  field('project_id', 'text'),
  ['usage_estimated', 'boolean', (row) => row.usage_estimated === true],
  ['cached_tokens', 'integer', (row) => row.cached_tokens ?? 0],
]);

const names = USAGE_ROWS.names;
// The raw rows and the daily rollup in one statement, so the rollup can never miss or double a batch.
// The rollup's groups are upserted in key order: two processes flushing batches that share groups
// then lock their rows in the same order and wait for each other, where the hash aggregate's own
// order could make each hold a row the other needs (a deadlock, and a retried batch).
const SQL = `with x as (select * from ${USAGE_ROWS.fromItem}),
  raw as (insert into llm_usage (${names}) select ${names} from x)
  insert into llm_usage_daily as d (day, user_id, api_key_id, model, provider_id, project_id, requests, prompt_tokens, completion_tokens, reasoning_tokens, cost_micro_usd, cached_tokens)
  select (created_at at time zone 'UTC')::date, coalesce(user_id, ''), coalesce(api_key_id, ''), model, coalesce(provider_id, ''), coalesce(project_id, ''),
         count(*), sum(prompt_tokens), sum(completion_tokens), sum(reasoning_tokens), sum(cost_micro_usd), sum(cached_tokens)
  from x group by 1, 2, 3, 4, 5, 6 order by 1, 2, 3, 4, 5, 6
  on conflict (day, user_id, api_key_id, model, provider_id, project_id) do update set
    requests = d.requests + excluded.requests,
    prompt_tokens = d.prompt_tokens + excluded.prompt_tokens,
    completion_tokens = d.completion_tokens + excluded.completion_tokens,
    reasoning_tokens = d.reasoning_tokens + excluded.reasoning_tokens,
    cost_micro_usd = d.cost_micro_usd + excluded.cost_micro_usd,
    cached_tokens = d.cached_tokens + excluded.cached_tokens`;

export async function insertUsageBatch(knex: Knex, batch: UsageRecord[]): Promise<void> {
  await knex.raw(SQL, USAGE_ROWS.bind(batch));
}
