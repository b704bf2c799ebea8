import test from 'ava';
import { ManualClock } from '../../../services/kit/index.js';
import type { ProviderModelRow } from '../../../services/llm-api/models/types.js';
import { createUsageMeters } from '../../../services/llm-api/usage/meter.js';
import type { UsageRecord } from '../../../services/llm-api/usage/recorder.js';

test('a meter writes one record when closed, whatever closes it later; cost from the routed pricing', (t) => {
  const records: UsageRecord[] = [];
  let now = 1000;
  const meters = createUsageMeters({ recorder: { record: (r) => void records.push(r) }, clock: new ManualClock(1_700_000_000_000), elapsed: () => now });
  const meter = meters.open({ requestId: 'r', userId: 'user_1', authMethod: 'apikey', apiKeyId: 'key_1', model: 'm', stream: true, metadata: { a: 'b' }, startedAt: 1000 });
  const pm = { id: 'pmdl_1', provider_id: 'prov_1', pricing: { lines: [{ unit: 'per_1k_completion_tokens', amount_micro_usd: 2000 }] } } as unknown as ProviderModelRow;
  meter.routed({ pm, endpoint: 'http://p/v1', tries: 2 });
  now = 1040;
  meter.firstByte();
  now = 1100;
  t.false(meter.closed);
  meter.close({ status: 200, outcome: 'ok', usage: { prompt_tokens: 3, completion_tokens: 500 } });
  meter.close({ status: 499, outcome: 'client_closed' });
  t.true(meter.closed);
  t.is(records.length, 1);
  t.like(records[0], { status: 200, outcome: 'ok', attempts: 2, ttfb_ms: 40, latency_ms: 100, total_tokens: 503, cost_micro_usd: 1000, provider_id: 'prov_1', endpoint: 'http://p/v1', api_key_id: 'key_1' });
  t.is(records[0]!.created_at.getTime(), 1_700_000_000_000);
});
