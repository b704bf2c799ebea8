#!/usr/bin/env node
// Prints the reliability figures the suites in test/reliability wrote under test-output/reliability
// as one table: faults injected and survived, requests and events checked, bad inputs tried per
// endpoint family, 5xx seen, items lost, and (in the suite's name, for the suites that count them)
// duplicate deliveries. `--readme` also replaces the table in README.md
// (between the reliability-table markers). `--clear` removes the figures of an earlier run.
import { existsSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const dir = join(root, 'test-output', 'reliability');

export function clearFigures() {
  rmSync(dir, { recursive: true, force: true });
}

export function readFigures() {
  if (!existsSync(dir)) return [];
  return readdirSync(dir)
    .filter((f) => f.endsWith('.json'))
    .sort()
    .flatMap((f) => {
      try {
        return JSON.parse(readFileSync(join(dir, f), 'utf8')).rows ?? [];
      } catch {
        return [{ label: `${f}: unreadable figures`, faultsInjected: 0, faultsSurvived: 0, requestsChecked: 0, eventsChecked: 0, badInputs: {}, fiveXx: 0, refused503: 0, itemsLost: 0 }];
      }
    });
}

const COLUMNS = ['suite', 'faults injected', 'survived', 'requests checked', 'events checked', 'bad inputs', 'clean 503 in outage', 'other 5xx seen', 'items lost'];
const sum = (o) => Object.values(o ?? {}).reduce((a, b) => a + b, 0);

// Duplicates are not a failure (at-least-once delivery allows them) and only the suites where a
// fault can redo a delivery count them, so they go with the row's name rather than a column of
// dashes; a row that counted them shows the figure even when it is 0.
const suiteName = (r) => (typeof r.duplicates === 'number' ? `${r.label} (${r.duplicates} duplicate deliver${r.duplicates === 1 ? 'y' : 'ies'})` : r.label);

/** The table as Markdown (readable as is in a terminal). */
export function renderTable(rows) {
  const lines = [];
  const cells = (values) => `| ${values.join(' | ')} |`;
  lines.push(cells(COLUMNS), cells(COLUMNS.map((c, i) => (i === 0 ? '---' : '---:'))));
  const total = { faultsInjected: 0, faultsSurvived: 0, requestsChecked: 0, eventsChecked: 0, bad: 0, refused503: 0, fiveXx: 0, itemsLost: 0 };
  for (const r of rows) {
    const bad = sum(r.badInputs);
    lines.push(cells([suiteName(r), r.faultsInjected, r.faultsSurvived, r.requestsChecked, r.eventsChecked, bad, r.refused503 ?? 0, r.fiveXx, r.itemsLost]));
    for (const [family, n] of Object.entries(r.badInputs ?? {})) lines.push(cells([`  ↳ ${family}`, '', '', '', '', n, '', '', '']));
    total.faultsInjected += r.faultsInjected;
    total.faultsSurvived += r.faultsSurvived;
    total.requestsChecked += r.requestsChecked;
    total.eventsChecked += r.eventsChecked;
    total.bad += bad;
    total.refused503 += r.refused503 ?? 0;
    total.fiveXx += r.fiveXx;
    total.itemsLost += r.itemsLost;
  }
  lines.push(cells(['**total**', total.faultsInjected, total.faultsSurvived, total.requestsChecked, total.eventsChecked, total.bad, total.refused503, total.fiveXx, total.itemsLost]));
  return lines.join('\n');
}

const START = '<!-- reliability-table:start -->';
const END = '<!-- reliability-table:end -->';

export function updateReadme(table) {
  const file = join(root, 'README.md');
  const text = readFileSync(file, 'utf8');
  const from = text.indexOf(START);
  const to = text.indexOf(END);
  if (from < 0 || to < from) throw new Error('README.md has no reliability-table markers');
  writeFileSync(file, text.slice(0, from + START.length) + '\n' + table + '\n' + text.slice(to));
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  if (process.argv.includes('--clear')) {
    clearFigures();
  } else {
    const rows = readFigures();
    if (rows.length === 0) {
      console.log('reliability: no figures (run test/reliability first)');
    } else {
      const table = renderTable(rows);
      console.log('\nReliability figures\n' + table + '\n');
      if (process.argv.includes('--readme')) updateReadme(table);
    }
  }
}
