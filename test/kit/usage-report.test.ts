import test from 'ava';
import { decodeUsageReport, encodeUsageReport, type UsageReport } from '../../services/kit/index.js';

// The usage report goes from a service to the edge in a header or trailer. Its text is the one
// URLSearchParams writes and reads, so an edge and a service of different versions (a rolling
// upgrade, or a service on another host) still understand each other.

const reports: UsageReport[] = [
  { model: 'gpt-4o-mini', provider: 'openai', prompt_tokens: 12, completion_tokens: 34, total_tokens: 46 },
  { model: 'org/model name+v2 & co=1 ☕ !~*\'()%', provider: 'prov ider/ü', prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 },
  { model: 'm', provider: null, prompt_tokens: 1, completion_tokens: 2, total_tokens: 3 },
];

test('a report survives the trip, and reads the same through URLSearchParams', (t) => {
  for (const report of reports) {
    const text = encodeUsageReport(report);
    t.deepEqual(decodeUsageReport(text), report);
    const params = new URLSearchParams(text);
    t.is(params.get('model'), report.model);
    t.is(params.get('provider'), report.provider);
    t.is(params.get('total_tokens'), String(report.total_tokens));
    t.regex(text, /^[\w.*%+=&-]+$/, 'a valid header value');
  }
});

test('the text is exactly what URLSearchParams writes, and what it wrote is read back', (t) => {
  for (const report of reports) {
    const params = new URLSearchParams({ model: report.model, prompt_tokens: String(report.prompt_tokens), completion_tokens: String(report.completion_tokens), total_tokens: String(report.total_tokens) });
    if (report.provider) params.set('provider', report.provider);
    t.is(encodeUsageReport(report), params.toString());
    t.deepEqual(decodeUsageReport(params.toString()), report);
  }
});

test('absent, malformed or hostile reports never throw', (t) => {
  t.is(decodeUsageReport(undefined), undefined);
  t.is(decodeUsageReport(''), undefined);
  t.is(decodeUsageReport('provider=x&total_tokens=5'), undefined, 'no model: no report');
  t.deepEqual(decodeUsageReport('model=%E0%A4%A&prompt_tokens=-4&completion_tokens=abc&total_tokens=1e400'), {
    model: '%E0%A4%A',
    provider: null,
    prompt_tokens: 0,
    completion_tokens: 0,
    total_tokens: 0,
  });
  t.deepEqual(decodeUsageReport('__proto__=x&constructor=y&model=a'), { model: 'a', provider: null, prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 });
  t.deepEqual(decodeUsageReport(['model=a&model=b&prompt_tokens=2.9&x=1', 'model=c']), { model: 'a', provider: null, prompt_tokens: 2, completion_tokens: 0, total_tokens: 0 });
});
