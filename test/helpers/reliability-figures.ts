import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * Figures of one reliability suite, written to `test-output/reliability/<name>.json` when the file
 * finishes; `scripts/reliability-table.mjs` prints them as one table at the end of
 * `npm run test:reliability` (and of `npm test`). A fault counts as survived only once the test
 * has checked the recovery it promises; a test that fails leaves injected > survived in the table.
 */
export interface FigureRow {
  /** What was done, e.g. "PostgreSQL connections cut mid-load". */
  label: string;
  faultsInjected: number;
  faultsSurvived: number;
  requestsChecked: number;
  eventsChecked: number;
  /** Bad inputs tried, by endpoint family ("llm-api /v1/conversations"). */
  badInputs: Record<string, number>;
  /** 5xx answers other than the clean 503 an outage promises (must be 0). */
  fiveXx: number;
  /** Clean 503 `service_unavailable` answers given while a dependency was out. */
  refused503: number;
  itemsLost: number;
  /** Requests a receiver got for an event it had already received (at-least-once paths: a killed worker's deliveries redone). */
  duplicates?: number;
}

export const FIGURES_DIR = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'test-output', 'reliability');

export interface Figures {
  row(label: string): FigureRow;
  write(): void;
}

/** One recorder per test file; each test adds to its own row (by label). */
export function reliabilityFigures(file: string): Figures {
  const rows = new Map<string, FigureRow>();
  return {
    row(label) {
      let row = rows.get(label);
      if (!row) {
        row = { label, faultsInjected: 0, faultsSurvived: 0, requestsChecked: 0, eventsChecked: 0, badInputs: {}, fiveXx: 0, refused503: 0, itemsLost: 0 };
        rows.set(label, row);
      }
      return row;
    },
    write() {
      mkdirSync(FIGURES_DIR, { recursive: true });
      writeFileSync(join(FIGURES_DIR, `${file}.json`), JSON.stringify({ file, writtenAt: new Date().toISOString(), rows: [...rows.values()] }, null, 2) + '\n');
    },
  };
}
