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

/** `targets: false` leaves out the target and verdict columns (a table whose cells carry their own). */
export function renderTable(columns: string[], rows: Row[], options: { targets?: boolean } = {}): string {
  const targets = options.targets ?? true;
  const header = ['metric', ...columns, ...(targets ? ['target', ''] : [])];
  const body = rows.map((r) => [r.metric, ...columns.map((c) => r.cells[c] ?? ''), ...(targets ? [r.target ?? '', r.verdict ?? ''] : [])]);
  const widths = header.map((h, i) => Math.max(h.length, ...body.map((line) => line[i]!.length)));
  const line = (cells: string[]) => cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ').trimEnd();
  return [line(header), widths.map((w) => '-'.repeat(w)).join('  '), ...body.map(line)].join('\n');
}
