/** The printed table and the targets checked beside it (figures, not tests: nothing here fails a build). */

export type Cell = string;

export interface Row {
  metric: string;
  cells: Record<string, Cell>;
  target?: string;
  verdict?: 'PASS' | 'FAIL' | 'n/a';
}

export const fmt = (n: number, digits = 2) => (Number.isFinite(n) ? n.toFixed(digits) : '—');
export const triple = (a: number, b: number, c: number, digits = 2) => `${fmt(a, digits)} / ${fmt(b, digits)} / ${fmt(c, digits)}`;

export function verdict(ok: boolean | undefined): Row['verdict'] {
  return ok === undefined ? 'n/a' : ok ? 'PASS' : 'FAIL';
}

export function renderTable(columns: string[], rows: Row[]): string {
  const header = ['metric', ...columns, 'target', ''];
  const body = rows.map((r) => [r.metric, ...columns.map((c) => r.cells[c] ?? ''), r.target ?? '', r.verdict ?? '']);
  const widths = header.map((h, i) => Math.max(h.length, ...body.map((line) => line[i]!.length)));
  const line = (cells: string[]) => cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ').trimEnd();
  return [line(header), widths.map((w) => '-'.repeat(w)).join('  '), ...body.map(line)].join('\n');
}
