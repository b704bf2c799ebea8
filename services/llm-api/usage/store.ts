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
  ['project_id', 'text'],
];

const names = COLUMNS.map(([c]) => c).join(', ');
const types = COLUMNS.map(([c, t]) => `${c} ${t}`).join(', ');
// The raw rows and the daily rollup in one statement, so the rollup can never miss or double a batch.
const SQL = `with x as (select * from jsonb_to_recordset(?::jsonb) as x(${types})),
  raw as (insert into llm_usage (${names}) select ${names} from x)
  insert into llm_usage_daily as d (day, user_id, api_key_id, model, provider_id, project_id, requests, prompt_tokens, completion_tokens, reasoning_tokens, cost_micro_usd)
  select (created_at at time zone 'UTC')::date, coalesce(user_id, ''), coalesce(api_key_id, ''), model, coalesce(provider_id, ''), coalesce(project_id, ''),
         count(*), sum(prompt_tokens), sum(completion_tokens), sum(reasoning_tokens), sum(cost_micro_usd)
  from x group by 1, 2, 3, 4, 5, 6
  on conflict (day, user_id, api_key_id, model, provider_id, project_id) do update set
    requests = d.requests + excluded.requests,
    prompt_tokens = d.prompt_tokens + excluded.prompt_tokens,
    completion_tokens = d.completion_tokens + excluded.completion_tokens,
    reasoning_tokens = d.reasoning_tokens + excluded.reasoning_tokens,
    cost_micro_usd = d.cost_micro_usd + excluded.cost_micro_usd`;

export async function insertUsageBatch(knex: Knex, batch: UsageRecord[]): Promise<void> {
  await knex.raw(SQL, [JSON.stringify(batch)]);
}
