import { fetchText, getAll } from '../api.js';
import { h, svg } from '../dom.js';
import type { Me } from '../session.js';
import { attempt, labelled, truncatedNote } from '../ui.js';

interface UsageRow {
  day?: string;
  model?: string;
  provider_id?: string | null;
  user_id?: string | null;
  key_id?: string | null;
  requests: number;
  total_tokens: number;
  /** Of the prompt tokens, those the provider served from its cache (reports from before the field: absent). */
  cached_tokens?: number;
  cost_micro_usd: number;
}
type Metric = 'requests' | 'total_tokens' | 'cost_micro_usd';
const METRICS: Record<Metric, string> = { requests: 'Requests', total_tokens: 'Tokens', cost_micro_usd: 'Cost (USD)' };
const COLORS = ['#2563eb', '#d97706', '#059669', '#7c3aed', '#dc2626', '#0891b2', '#65a30d', '#db2777'];

/** What the bars are stacked by: the API's group_by name and the row field it fills. */
type Stack = 'model' | 'provider' | 'user' | 'key';
const STACKS: Record<Stack, { label: string; field: 'model' | 'provider_id' | 'user_id' | 'key_id' }> = {
  model: { label: 'Model', field: 'model' },
  provider: { label: 'Provider', field: 'provider_id' },
  user: { label: 'User', field: 'user_id' },
  key: { label: 'API key', field: 'key_id' },
};
const stackValue = (row: UsageRow, stack: Stack) => row[STACKS[stack].field] ?? '(none)';

const isoDay = (d: Date) => d.toISOString().slice(0, 10);

/** Usage per day, stacked by model, provider, user or key: the caller's own (`/v1/usage`), or everyone's for admins. */
export function usagePage(root: HTMLElement, me: Me) {
  const base = me.is_admin ? '/v1/admin/usage' : '/v1/usage';
  const today = new Date();
  const from = h('input', { type: 'date', name: 'from', value: isoDay(new Date(today.getTime() - 29 * 86_400_000)) });
  const to = h('input', { type: 'date', name: 'to', value: isoDay(today) });
  const metric = h('select', { name: 'metric' }, ...Object.entries(METRICS).map(([value, label]) => h('option', { value }, label)));
  const stacks = (Object.keys(STACKS) as Stack[]).filter((s) => me.is_admin || s !== 'user');
  const stackBy = h('select', { name: 'stack' }, ...stacks.map((s) => h('option', { value: s }, STACKS[s].label)));
  const slot = h('div', {});
  const chartSlot = h('div', { class: 'chart' });
  const tableSlot = h('div', {});
  const exportButton = h('button', { type: 'button', class: 'secondary' }, 'Export CSV');
  let rows: UsageRow[] = [];

  // What the chart shows (grouping and range): the export asks for exactly that, even when the
  // range fields were changed since without pressing Show.
  let shown: { stack: Stack; from: string; to: string } = { stack: 'model', from: from.value, to: to.value };
  const query = (q: { stack: Stack; from: string; to: string }) => new URLSearchParams({ group_by: `day,${q.stack}`, from: q.from, to: q.to }).toString();
  const form = h(
    'form',
    { class: 'card row', 'aria-label': 'Date range' },
    labelled('From', from),
    labelled('To', to),
    labelled('Chart', metric),
    labelled('Stack by', stackBy),
    h('button', { type: 'submit' }, 'Show'),
    me.is_admin ? exportButton : null,
  );
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    void load();
  });
  metric.addEventListener('change', () => draw());
  stackBy.addEventListener('change', () => void load());
  exportButton.addEventListener('click', async () => {
    const csv = await attempt(slot, () => fetchText(`/v1/admin/usage/export?${query(shown)}`));
    if (csv === undefined) return;
    const link = h('a', { href: URL.createObjectURL(new Blob([csv], { type: 'text/csv' })), download: `usage-${shown.stack}-${shown.from}-${shown.to}.csv` });
    document.body.append(link);
    link.click();
    link.remove();
  });

  root.replaceChildren(h('h1', {}, me.is_admin ? 'Usage (everyone)' : 'Your usage'), form, slot, chartSlot, tableSlot);

  async function load() {
    const asked = { stack: stackBy.value as Stack, from: from.value, to: to.value };
    // Every page of the report (bounded), so a long range or many groups still shows its last days.
    const page = await attempt(slot, () => getAll<UsageRow>(`${base}?${query(asked)}`, { pageSize: 1000, maxItems: 50_000 }));
    if (!page) return;
    if (page.truncated) slot.replaceChildren(truncatedNote(page));
    rows = page.data;
    shown = asked;
    draw();
  }

  function draw() {
    const m = metric.value as Metric;
    chartSlot.replaceChildren(chart(rows, m, shown.stack));
    tableSlot.replaceChildren(table(rows, shown.stack));
  }

  void load();
}

const value = (row: UsageRow, m: Metric) => (m === 'cost_micro_usd' ? row.cost_micro_usd / 1e6 : row[m]);

/** A stacked bar per day, one colour per model (provider, user, key), drawn as SVG elements (text nodes only). */
function chart(rows: UsageRow[], m: Metric, stack: Stack): Element {
  if (!rows.length) return h('p', {}, 'No usage in this range.');
  const days = [...new Set(rows.map((r) => r.day ?? ''))].sort();
  const groups = [...new Set(rows.map((r) => stackValue(r, stack)))].sort();
  const totals = days.map((d) => rows.filter((r) => r.day === d).reduce((sum, r) => sum + value(r, m), 0));
  const max = Math.max(...totals, 1e-9);
  const width = 640;
  const height = 240;
  const pad = 40;
  const band = (width - pad * 2) / days.length;
  const bar = Math.max(4, Math.min(48, band * 0.7));
  const scale = (v: number) => (v / max) * (height - pad * 2);
  const parts: SVGElement[] = [];
  days.forEach((day, i) => {
    let y = height - pad;
    const x = pad + i * band + (band - bar) / 2;
    for (const [gi, group] of groups.entries()) {
      const row = rows.find((r) => r.day === day && stackValue(r, stack) === group);
      if (!row) continue;
      const hgt = scale(value(row, m));
      y -= hgt;
      parts.push(svg('rect', { x, y, width: bar, height: Math.max(hgt, 0.5), fill: COLORS[gi % COLORS.length]!, 'data-day': day, [`data-${stack}`]: group, 'data-value': value(row, m) }, svg('title', {}, `${day} ${group}: ${value(row, m)}`)));
    }
    parts.push(svg('text', { x: x + bar / 2, y: height - pad + 16, 'text-anchor': 'middle', 'font-size': 11 }, day.slice(5)));
  });
  parts.push(svg('line', { x1: pad, y1: height - pad, x2: width - pad, y2: height - pad, stroke: '#555' }));
  parts.push(svg('text', { x: pad, y: pad - 12, 'font-size': 12 }, `${METRICS[m]} per day (max ${Math.round(max * 1e6) / 1e6})`));
  const legend = h('ul', { class: 'legend' }, ...groups.map((group, gi) => h('li', {}, h('span', { class: `swatch c${gi % COLORS.length}` }), group)));
  const figure = svg('svg', { viewBox: `0 0 ${width} ${height}`, role: 'img', 'aria-label': `${METRICS[m]} per day, stacked by ${STACKS[stack].label.toLowerCase()}`, class: 'usage-chart', 'data-stack': stack }, ...parts);
  return h('figure', {}, figure as unknown as Node as HTMLElement, legend);
}

function table(rows: UsageRow[], stack: Stack): HTMLElement {
  return h(
    'table',
    { class: 'usage' },
    h('thead', {}, h('tr', {}, h('th', {}, 'Day'), h('th', {}, STACKS[stack].label), h('th', {}, 'Requests'), h('th', {}, 'Tokens'), h('th', {}, 'Cached prompt tokens'), h('th', {}, 'Cost (USD)'))),
    h('tbody', {}, ...rows.map((r) => h('tr', {}, h('td', {}, r.day ?? ''), h('td', {}, stackValue(r, stack)), h('td', {}, r.requests), h('td', {}, r.total_tokens), h('td', { class: 'cached' }, r.cached_tokens ?? 0), h('td', {}, (r.cost_micro_usd / 1e6).toFixed(6))))),
  );
}
